// Package member is the pod side of a ConsumerGroup: it tells the application in a member pod which
// queues to consume, and tells the operator which assignment the application has applied and which
// queues it may be reading.
//
// A Client is two parts. Its assignment view watches the group's assignment ConfigMap through the API
// server (a mounted ConfigMap volume lags by a minute or more) and checks that the watch keeps up. Its
// Lease keeper holds the member's Lease: it renews it, and writes into it the generation the application
// acknowledges and the member's claim, every queue the application may be reading. The Client delivers an
// assignment only while the Lease is held and fresh, and waits, on shutdown, for the operator to take the
// pod's queues away. The protocol (pkg/protocol), the RBAC a pod needs and how clients in other languages
// follow it are in docs/protocol.md.
//
// Typical use:
//
//	cfg, err := member.ConfigFromEnv()
//	c, err := member.New(clientset, cfg)
//	go c.Run(ctx)
//	for a := range c.Updates() {
//		consume(a.Queues)                 // start and stop consumers to match
//		c.Ack(ctx, a.Generation)
//	}
//
// A preStop hook calls Drain, which returns once the operator has released the pod's queues and the
// member's Lease claims none: from then on the member reads nothing until its process restarts.
//
// # Node mode
//
// With Config.NodeAgent set, the member confirms its view (contact fencing) by asking the node agent on
// its node (package nodeagent) instead of reading the assignment's metadata itself: the agent answers
// every member on the node with one read a second. The member says which generation its view holds
// (view.go, held), and the agent confirms when its node view asks for no later one. A member whose first
// request finds no agent confirms with its own reads for the rest of its life; once an agent has
// answered, only the agent confirms (nodemode.go).
//
// # Phases
//
// A member is in one of six phases (state.go), and one function, decide, says which comes next. Each time
// something the member observes changes (its view, its Lease, its contact fence, the claim its Lease
// holds), decide reads it all again and goes down this tree; the phase it reaches says what is in force:
//
//	                     assignment ConfigMap read?
//	                  no /                       \ yes
//	             Starting          ConfigMap there, pod's entry readable?
//	                                 no /                     \ yes
//	                           Unassigned       Lease held and fresh, view confirmed?
//	                                          no /                                \ yes
//	                                        Fenced              Lease claims the entry's queues?
//	                                                          no /                             \ yes
//	                                                     Claiming --- claim written ---> Following
//
//	any phase --- Drain ---> Stopped, until the process restarts
//
// In Starting, Unassigned and Fenced nothing is in force: the application is handed generation 0. In
// Claiming the assignment in force stays until the Lease claims the new one's queues, so that no queue is
// read unclaimed. An entry older than the newest delivered, or another under the same generation, leaves
// the member where it is. Drain waits in whichever phase the member is in for the operator to release the
// pod's queues, then stops it; nothing leaves Stopped.
//
// # The Lease keeper
//
// The Client and the keeper of its Lease each see the other through one small interface, which says all
// that one asks of the other. The Client uses its Lease through memberLease (run, status, requestWrite,
// writeNow, flush), which a leaseKeeper implements; the keeper asks the Client what to write, and tells it
// what it wrote, through leaseSource (record, recorded, adopt, leaseChanged), which the Client implements.
//
// # Locks
//
// Taken only in this order: the Client's ackMu (one acknowledgement at a time), then the keeper's writeMu
// (one write of the Lease at a time, held across its API calls), then at most one of the Client's mu (its
// state and acknowledgements), the keeper's mu, the view's mu and the contact fence's mu, which guard
// their own fields and are never held together. Every one is released by defer.
package member
