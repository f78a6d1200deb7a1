// Package fleet is fleetcast's domain model: the key of an Agones Fleet in a
// cluster, the compact state a publisher projects from it, the versioned
// events that carry that state over Pub/Sub, and the Firestore documents the
// ingest function derives from them.
//
// It imports nothing but the standard library, so the publisher, the Cloud
// Functions and the clients all share one definition of what is valid and of
// how a newer event wins over an older one.
//
// Ordering is by Version alone. A Version is (term, seq): term is a fencing
// token that grows whenever a new publisher instance becomes the writer for
// its cluster, seq grows within a term. Neither Kubernetes resourceVersions
// nor Pub/Sub ordering keys take part: the ingest function never sees the
// latter, and the former are meaningless across clusters and restores.
package fleet
