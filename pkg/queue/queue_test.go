package queue

import "testing"

func TestString(t *testing.T) {
	if got, want := (Queue{Topic: "orders", Broker: "broker-a", ID: 12}).String(), "orders/broker-a/12"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}
