// Package nameserver reads topic routes from RocketMQ name servers: the GET_ROUTEINFO_BY_TOPIC request
// (code 105) of RocketMQ's remoting protocol, with JSON headers, and the route data it answers with.
//
// It is small on purpose. rocketmq-client-go has this codec, but in an internal package: the only way to
// use it from outside is the whole client (producer, consumer, admin), with its own goroutines and
// logging. This package has the few parts the operator needs, with every read bounded: a frame is at most
// MaxFrame bytes, a route at most MaxBrokers brokers of at most MaxQueues queues each, and each request
// has a deadline. Its frames are checked against rocketmq-client-go's in clients/rocketmq-go's tests.
//
// It imports nothing from Kubernetes.
package nameserver
