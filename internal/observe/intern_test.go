package observe

import (
	"reflect"
	"strings"
	"testing"
)

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func TestSharedMapSharesEqualMapsOnly(t *testing.T) {
	clear(sharedMaps.byKey)
	app := func() map[string]string { return map[string]string{"app": "orders", "pod-template-hash": "abc"} }
	a, b := SharedMap(app()), SharedMap(app())
	if !sameMap(a, b) || !reflect.DeepEqual(a, app()) {
		t.Fatalf("equal maps: %v and %v, shared: %v", a, b, sameMap(a, b))
	}
	tests := []map[string]string{
		{"app": "orders"},
		{"app": "orders", "pod-template-hash": "abd"},
		{"app": "orders", "pod-template-hash": "abc", "tier": "back"},
		// The same text split otherwise is another map.
		{"app": "orderspod-template-hash", "": "abc"},
	}
	for _, m := range tests {
		got := SharedMap(m)
		if sameMap(got, a) || !reflect.DeepEqual(got, m) {
			t.Errorf("SharedMap(%v) = %v, shared with %v: %v", m, got, a, sameMap(got, a))
		}
	}
	if SharedMap(nil) != nil || SharedMap(map[string]string{}) != nil {
		t.Errorf("an empty map is not nil")
	}
}

func TestSharedMapKeepsItsTableBounded(t *testing.T) {
	clear(sharedMaps.byKey)
	first := SharedMap(map[string]string{"n": "0"})
	for i := range maxSharedMaps {
		SharedMap(map[string]string{"n": strings.Repeat("x", i%50), "i": string(rune('a' + i%26)), "k": string(rune(i))})
		if len(sharedMaps.byKey) > maxSharedMaps {
			t.Fatalf("%d maps kept, more than %d", len(sharedMaps.byKey), maxSharedMaps)
		}
	}
	// The table was cleared on the way: the first map is no longer handed out, but is still whole.
	again := SharedMap(map[string]string{"n": "0"})
	if sameMap(first, again) || first["n"] != "0" {
		t.Errorf("after the table filled up: shared %v, first map %v", sameMap(first, again), first)
	}
	large := map[string]string{"a": strings.Repeat("x", maxSharedMapBytes)}
	if sameMap(SharedMap(large), SharedMap(large)) {
		t.Errorf("a map larger than %d bytes is shared", maxSharedMapBytes)
	}
}
