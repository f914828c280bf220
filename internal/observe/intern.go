package observe

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"unique"
)

// Intern is the one copy of s that every cached object holding the same text shares. Decoding gives each
// object its own copy of every string, and many repeat across thousands of objects: namespaces, label
// and annotation keys, label values such as an application's name, node names, owners' kinds and
// names. The copies are freed with the last object that holds them.
func Intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// InternKeys is m with its keys interned, and its values too when values is set: label values repeat
// across the pods of one application; annotation values (claims, load reports) seldom do. It makes a new
// map only when m has entries.
func InternKeys(m map[string]string, values bool) map[string]string {
	return InternKeysWith(m, func(_, v string) string {
		if values {
			return Intern(v)
		}
		return v
	})
}

// InternKeysWith is m with its keys interned and each value v of key k replaced by value(k, v), for a
// caller that knows which values repeat. It makes a new map only when m has entries.
func InternKeysWith(m map[string]string, value func(k, v string) string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[Intern(k)] = value(k, v)
	}
	return out
}

// SharedMap is a map equal to m, shared by every cached object whose map is equal to m: the labels (and
// often the annotations) of the pods of one ReplicaSet, and the labels of one group's member Leases, are
// the same map. A map costs over 300 bytes however few its entries; pods and member Leases are the objects
// an operator of many members holds most of. The map is shared with later callers only while it is in
// sharedMaps, which forgets everything when full: the maps already given out stay with their objects.
// Maps larger than maxSharedMapBytes are not shared but get their keys and values interned.
//
// The maps are read-only, as everything in an informer's cache is: a change to one would change every
// object sharing it.
func SharedMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	key, ok := mapKey(m)
	if !ok {
		return InternKeys(m, true)
	}
	sharedMaps.mu.Lock()
	defer sharedMaps.mu.Unlock()
	if shared, ok := sharedMaps.byKey[key]; ok {
		return shared
	}
	if len(sharedMaps.byKey) >= maxSharedMaps {
		clear(sharedMaps.byKey)
	}
	shared := InternKeys(m, true)
	sharedMaps.byKey[key] = shared
	return shared
}

// maxSharedMaps bounds sharedMaps: a few hundred bytes each, some megabytes in all. A cluster's distinct
// label sets among pods are about its ReplicaSets and StatefulSet pods; when there are more, sharing
// restarts with the maps made after the table was cleared.
const maxSharedMaps = 16384

// maxSharedMapBytes bounds the text of a map that SharedMap shares: larger ones are seldom equal, and
// the table would hold their text.
const maxSharedMapBytes = 1024

var sharedMaps = struct {
	mu    sync.Mutex
	byKey map[string]map[string]string
}{byKey: map[string]map[string]string{}}

// mapKey is m's entries in key order, each string prefixed with its length, so that no two maps have the
// same key; false when the text is longer than maxSharedMapBytes.
func mapKey(m map[string]string) (string, bool) {
	size := 0
	for k, v := range m {
		size += len(k) + len(v)
	}
	if size > maxSharedMapBytes {
		return "", false
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(size + 8*len(m))
	for _, k := range keys {
		for _, s := range [2]string{k, m[k]} {
			b.WriteString(strconv.Itoa(len(s)))
			b.WriteByte(':')
			b.WriteString(s)
		}
	}
	return b.String(), true
}
