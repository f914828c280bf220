package main

import (
	"fmt"
	"testing"
)

// assignedTopics decides as the operator does which topics it assigns (docs/nameserver.md, "The retry
// topic, and dead letters").
func TestAssignedTopics(t *testing.T) {
	for _, tc := range []struct {
		name, group string
		want        string
	}{
		{"static topics, no name server: no retry topic",
			`{"metadata":{"name":"orders"},"spec":{"topics":[{"name":"orders","brokers":[{"name":"broker-a","queues":4}]},{"name":"audit"}]}}`,
			"[audit orders]"},
		{"a name server: the retry topic, named for the group",
			`{"metadata":{"name":"orders"},"spec":{"topics":[{"name":"orders"}],"nameServer":{"addresses":["10.0.0.1:9876"],"retryTopic":"Assign"}}}`,
			"[%RETRY%orders orders]"},
		{"retryTopic unset is Assign",
			`{"metadata":{"name":"orders"},"spec":{"topics":[{"name":"orders"}],"nameServer":{"addresses":["10.0.0.1:9876"]}}}`,
			"[%RETRY%orders orders]"},
		{"groupName names the retry topic",
			`{"metadata":{"name":"cg"},"spec":{"topics":[{"name":"orders"}],"nameServer":{"addresses":["10.0.0.1:9876"],"groupName":"order-consumers"}}}`,
			"[%RETRY%order-consumers orders]"},
		{"retryTopic Ignore",
			`{"metadata":{"name":"orders"},"spec":{"topics":[{"name":"orders"}],"nameServer":{"addresses":["10.0.0.1:9876"],"retryTopic":"Ignore"}}}`,
			"[orders]"},
		{"Broadcasting has no retry topic",
			`{"metadata":{"name":"orders"},"spec":{"messageModel":"Broadcasting","topics":[{"name":"orders"}],"nameServer":{"addresses":["10.0.0.1:9876"]}}}`,
			"[orders]"},
		{"a retry topic listed as a topic is listed once",
			`{"metadata":{"name":"orders"},"spec":{"topics":[{"name":"orders"},{"name":"%RETRY%orders"}],"nameServer":{"addresses":["10.0.0.1:9876"]}}}`,
			"[%RETRY%orders orders]"},
		{"the dead-letter topic only when listed",
			`{"metadata":{"name":"orders"},"spec":{"topics":[{"name":"orders"},{"name":"%DLQ%orders"}],"nameServer":{"addresses":["10.0.0.1:9876"],"retryTopic":"Ignore"}}}`,
			"[%DLQ%orders orders]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := assignedTopics([]byte(tc.group))
			if err != nil || fmt.Sprint(got) != tc.want {
				t.Errorf("assignedTopics = %q, %v; want %s", got, err, tc.want)
			}
		})
	}
	if _, err := assignedTopics([]byte(`not json`)); err == nil {
		t.Errorf("assignedTopics of something that is not JSON returned no error")
	}
}
