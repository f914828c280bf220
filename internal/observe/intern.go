package observe

import "unique"

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
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if values {
			v = Intern(v)
		}
		out[Intern(k)] = v
	}
	return out
}
