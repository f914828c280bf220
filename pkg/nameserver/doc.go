// Package nameserver reads topic routes from RocketMQ name servers: the GET_ROUTEINFO_BY_TOPIC request
// (code 105) of RocketMQ's remoting protocol, with JSON headers, and the route data it answers with.
//
// It is small on purpose. rocketmq-client-go has this codec, but in an internal package: the only way to
// use it from outside is the whole client (producer, consumer, admin), with its own goroutines and
// logging. This package has the few parts the operator needs. Its frames are checked against
// rocketmq-client-go's in clients/rocketmq-go's tests.
//
// The operator reads name servers on behalf of tenants, so what a tenant names and what a name server
// answers are both untrusted:
//
//   - Where it connects. A Client with an Egress connects only where an administrator allowed: ranges
//     and ports, checked on the address actually dialled, after name resolution, by the dialer just
//     before it connects, so a name cannot lead elsewhere between a check and a connection. Loopback,
//     link-local (cloud metadata) and forbidden addresses (the API server's) need ranges listed for them
//     alone. A destination not allowed fails with ReasonNotAllowed, and nothing is dialled.
//   - How. A Client with a TLS configuration speaks TLS around the same frames, as RocketMQ does, and
//     verifies the name server's certificate for the dialled host unless told another name; a failed
//     handshake is ReasonUntrusted. Credentials go over TLS only: without it, and unless
//     PlaintextCredentials says otherwise, nothing is dialled and every name server fails with
//     ReasonDenied.
//   - What it reads. Every read is bounded: a frame is at most MaxFrame bytes, memory for it is
//     allocated as its bytes arrive rather than as its length announces, a route holds at most
//     MaxBrokers brokers of at most MaxQueues queues each and no number longer than any field takes,
//     and each request, connection and handshake included, has a deadline that holds however slowly
//     the bytes come.
//   - What it tells. A failure has a Reason, one CamelCase word, and a Sentence fixed per reason, for
//     conditions and events: neither carries error text or any byte a name server sent. An Error's own
//     text has more detail (a rejection's remark, cut short), for the operator's log only.
//
// It imports nothing from Kubernetes.
package nameserver
