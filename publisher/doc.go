// Package publisher is fleetcast's in-cluster agent. It watches Agones
// Fleets through a dynamic informer, projects each into the compact
// fleet.State, coalesces churn per fleet, stamps every event with a
// (term, seq) version, and hands events to a Sender that delivers them to
// Pub/Sub with retries, keeping only the latest state per fleet while
// Pub/Sub is unreachable.
//
// Only the leader publishes. Each time an instance becomes the writer for
// its cluster it takes a new term, stored on its Lease so that it grows
// across restarts, leader changes and skewed clocks, then republishes every
// fleet and a snapshot, which lets the ingest function heal deletes that
// happened while no publisher ran.
//
// With Config.GRPCAddr every instance, leader or standby, also answers
// fleetcast.v1.InformationService for its cluster from its own informers
// (package inform: single-cluster mode); with Config.Publish false that is
// all it does.
package publisher
