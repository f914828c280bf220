package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// This file is the layout of an assignment over the group's ConfigMaps and its writing: Layout spreads the
// entries over the index and shard ConfigMaps, and Digest seals each. layout_read.go reads them back.

const (
	// MaxConfigMapBytes keeps a ConfigMap's data under the API server's 1 MiB limit, with room for
	// metadata; larger assignments are spread over shard ConfigMaps.
	MaxConfigMapBytes = 900 * 1024
	// MaxShards bounds the shard ConfigMaps of one group (about 56 MiB of entries).
	MaxShards = 64
)

// ErrTooLarge is returned by Layout for an assignment that MaxShards ConfigMaps cannot hold.
var ErrTooLarge = errors.New("assignment too large")

// Part is one ConfigMap of a published assignment: its name, data and the protocol's annotations.
type Part struct {
	Name        string
	Data        map[string]string
	Annotations map[string]string
}

// Layout spreads the entries of one generation (pod name to encoded Entry) over the group's ConfigMaps
// and returns them in the order they must be written. The assignment ConfigMap (the index) holds them
// itself when they fit in MaxConfigMapBytes; otherwise it holds no entries, and the entries go to the
// smallest power of two of shards in which each fits (powers of two keep most entries in place when the
// count changes by one step). Shards come first and the index last: a reader follows the index to its
// shard, so the shard must hold the generation before the index names it. index holds the operator's own
// annotations for the index (RebalancedAtAnnotation, HandoffAnnotation). Every part carries the
// generation and its Digest.
func Layout(group string, generation int64, entries map[string]string, index map[string]string) ([]Part, error) {
	shards, err := shardCount(entries)
	if err != nil {
		return nil, err
	}
	gen := strconv.FormatInt(generation, 10)
	indexPart := Part{Name: AssignmentName(group), Data: entries, Annotations: maps.Clone(index)}
	if indexPart.Annotations == nil {
		indexPart.Annotations = map[string]string{}
	}
	indexPart.Annotations[GenerationAnnotation] = gen
	var parts []Part
	if shards > 1 {
		data := make([]map[string]string, shards)
		for k := range data {
			data[k] = map[string]string{}
		}
		for pod, value := range entries {
			data[ShardOf(pod, shards)][pod] = value
		}
		for k := range data {
			parts = append(parts, Part{Name: ShardName(group, k), Data: data[k], Annotations: map[string]string{GenerationAnnotation: gen}})
		}
		indexPart.Data = map[string]string{}
		indexPart.Annotations[ShardsAnnotation] = strconv.Itoa(shards)
	}
	parts = append(parts, indexPart)
	for i := range parts {
		parts[i].Annotations[DigestAnnotation] = Digest(parts[i].Name, parts[i].Annotations, parts[i].Data)
	}
	return parts, nil
}

// shardCount is how many ConfigMaps entries need: 1 when they fit the index, otherwise the smallest power
// of two for which every shard fits.
func shardCount(entries map[string]string) (int, error) {
	total := 0
	for key, value := range entries {
		total += len(key) + len(value)
	}
	if total <= MaxConfigMapBytes {
		return 1, nil
	}
	for shards := 2; shards <= MaxShards; shards *= 2 {
		sizes := make([]int, shards)
		fits := true
		for key, value := range entries {
			k := ShardOf(key, shards)
			if sizes[k] += len(key) + len(value); sizes[k] > MaxConfigMapBytes {
				fits = false
				break
			}
		}
		if fits {
			return shards, nil
		}
	}
	return 0, fmt.Errorf("%w: the entries take %d bytes, more than %d ConfigMaps of %d bytes can hold",
		ErrTooLarge, total, MaxShards, MaxConfigMapBytes)
}

// digested are the annotations Digest covers: everything the operator writes on an assignment ConfigMap
// but the digest itself.
var digested = []string{GenerationAnnotation, HandoffAnnotation, RebalancedAtAnnotation, ShardsAnnotation}

// Digest is the SHA-256, in hex after "sha256:", of a ConfigMap's name, the annotations the protocol
// writes on it and its data, each key and value followed by a zero byte, keys in order. The operator
// writes it as DigestAnnotation and checks it when it reads the ConfigMap back.
func Digest(name string, annotations, data map[string]string) string {
	h := sha256.New()
	write := func(s string) {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	write(name)
	for _, k := range digested {
		if v, ok := annotations[k]; ok {
			write(k)
			write(v)
		}
	}
	write("")
	for _, k := range slices.Sorted(maps.Keys(data)) {
		write(k)
		write(data[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
