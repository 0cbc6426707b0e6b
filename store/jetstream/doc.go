// Package jetstream is a store.Store on NATS JetStream.
package jetstream
