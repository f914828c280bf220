package allocate

import (
	"fmt"
	"testing"
)

// BenchmarkStickyReplan measures Sticky's re-plan after one member joins a group whose previous plan is
// Sticky's own, on the same group shape as BenchmarkReplan. The previous plan is built outside the loop.
func BenchmarkStickyReplan(b *testing.B) {
	for _, size := range benchSizes {
		in := benchInput(size.queues, size.members)
		s := mustSticky(b, 0)
		prev, err := s.Allocate(in)
		if err != nil {
			b.Fatal(err)
		}
		joined := in
		joined.Members = append(append([]Member{}, in.Members...), Member{ID: "10.0.99.1@consumer-joined", Zone: "zone-0"})
		joined.Previous = prev
		b.Run(fmt.Sprintf("Sticky/%dx%d", size.queues, size.members), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Allocate(joined); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStickyAllocate measures a first plan, with no previous plan to keep.
func BenchmarkStickyAllocate(b *testing.B) {
	for _, size := range benchSizes {
		in := benchInput(size.queues, size.members)
		s := mustSticky(b, 0)
		b.Run(fmt.Sprintf("Sticky/%dx%d", size.queues, size.members), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Allocate(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
