package protocol

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The decoders below read what anyone with write access to a ConfigMap or a Lease may have written. The
// fuzz tests check that none of them panics or runs away, and that what they accept is canonical: it
// encodes back to an equivalent value.

func FuzzDecodeEntry(f *testing.F) {
	f.Add([]byte(NewEntry("m", "u", 3, []Queue{q("t", "b", 0), q("t", "b", 1), q("t", "c", 9)}).Encode()))
	f.Add([]byte(`{"version":1,"generation":1,"member":"m","queues":[{"topic":"t","broker":"b","ids":"0-3,8"}]}`))
	f.Add([]byte(`{"version":1,"generation":1,"member":"m","queues":[{"topic":"t","broker":"b","ids":"0-65535"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, queues, err := DecodeEntry(data)
		if err != nil {
			return
		}
		if len(queues) > MaxQueues {
			t.Fatalf("accepted %d queues", len(queues))
		}
		again := NewEntry(e.Member, e.PodUID, e.Generation, queues)
		_, back, err := DecodeEntry(again.Encode())
		if err != nil || !slices.Equal(back, queues) {
			t.Fatalf("re-encoding %q gives %v, %v", data, back, err)
		}
	})
}

func FuzzDecodeClaim(f *testing.F) {
	f.Add(NewClaim("u", 4, []Queue{q("t", "b", 0), q("t", "b", 2)}).Encode())
	f.Add(`z:` + "80DFAA==")
	f.Add(`{"version":1,"podUID":"u","acked":1,"queues":[{"topic":"t","broker":"b","ids":"1,3-4"}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		c, queues, err := DecodeClaim(s)
		if err != nil {
			return
		}
		_, back, err := DecodeClaim(NewClaim(c.PodUID, c.Acked, queues).Encode())
		if err != nil || !slices.Equal(back, queues) {
			t.Fatalf("re-encoding %q gives %v, %v", s, back, err)
		}
	})
}

func FuzzReadLease(f *testing.F) {
	m := MemberLease{Group: "g", Pod: "p", PodUID: "u", Member: "m", Duration: time.Minute, Acked: 2, Claim: []Queue{q("t", "b", 1)}}
	t0 := time.Unix(1e9, 0)
	l := m.Apply(nil, "ns", &t0, &t0)
	f.Add(l.Annotations[AckedGenerationAnnotation], l.Annotations[ClaimAnnotation], int32(60), "u")
	f.Add("x", "{", int32(-5), "")
	f.Fuzz(func(t *testing.T, acked, claim string, seconds int32, ownerUID string) {
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Annotations:     map[string]string{AckedGenerationAnnotation: acked, ClaimAnnotation: claim},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "u"}},
			},
			Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &seconds, RenewTime: &metav1.MicroTime{Time: time.Unix(1e9, 0)}},
		}
		if ownerUID != "" {
			lease.OwnerReferences[0].UID = "other"
		}
		s := ReadLease(lease)
		if s.Duration <= 0 || s.Duration > MaxLeaseDuration || s.AckedGeneration < 0 {
			t.Fatalf("read duration %v, acked %d", s.Duration, s.AckedGeneration)
		}
		if s.ClaimErr != nil && (s.Claim != nil || s.Released()) {
			t.Fatalf("an unreadable claim reads as %v, released %v", s.Claim, s.Released())
		}
	})
}

func FuzzReadPublished(f *testing.F) {
	parts, _ := Layout("g", 3, map[string]string{"p": string(NewEntry("m", "u", 3, []Queue{q("t", "b", 1)}).Encode())}, map[string]string{HandoffAnnotation: "{}"})
	f.Add(parts[0].Annotations[GenerationAnnotation], parts[0].Annotations[ShardsAnnotation], parts[0].Data["p"], parts[0].Annotations[DigestAnnotation])
	f.Add("7", "2", "{}", "")
	f.Fuzz(func(t *testing.T, generation, shards, entry, digest string) {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "g-assignment", Annotations: map[string]string{
				GenerationAnnotation: generation, ShardsAnnotation: shards, DigestAnnotation: digest}},
			Data: map[string]string{"p": entry},
		}
		p := ReadPublished("g", cm, map[string]*corev1.ConfigMap{"g-assignment-0": cm, "g-assignment-1": cm})
		if p.Generation < 0 || p.Shards < 1 || p.Shards > MaxShards {
			t.Fatalf("read generation %d over %d shards", p.Generation, p.Shards)
		}
		if len(p.Tampered) == 0 && Digest(cm.Name, cm.Annotations, cm.Data) != digest {
			t.Fatal("a ConfigMap that does not match its digest reads as untouched")
		}
		_, _ = ViewEntry("g", cm, cm, true, "p", "u")
	})
}
