// Package fleetview is the query side's view engine: every live fleet and
// cluster of a deployment (or of one partition of it) held in memory, kept
// current from a Source at the cost of what changed, and read as immutable
// snapshots.
//
// One writer — a sync round or the listener's delivery, under the
// Engine's write lock — builds the next Snapshot from the previous one and
// what changed: the fleets are a copy-on-write B-tree, so a change copies
// the few nodes on its path and a snapshot shares the rest; the clusters'
// maps are copied only when a cluster changed. The writer publishes it with
// one atomic store. A reader takes the newest snapshot with one atomic load
// and works on a value nobody changes, for as long as it likes: no reader
// takes a lock, waits for a sync or for another reader, and an expensive
// query delays no one but its caller. This is client-go's tools/cache
// (listers that never touch the network) with Prometheus' tsdb head's
// publication by pointer.
//
// Sync rounds run one at a time. A default read never waits for one once
// the view has loaded: it starts a round in the background when its
// snapshot is older than half of Options.MaxStaleness and none runs, and
// waits only on an idle instance, whose snapshot is older than
// MaxStaleness with no round under way to bring it closer. A strict read
// (Engine.Sync, and every read when MaxStaleness is 0) waits for the round
// that covers its start: the running one if it began after the call, else
// the one after it.
//
// Each snapshot also holds an index of its fleets (Set), after the
// postings of Prometheus' tsdb: for each label, label key and cluster, the
// fleets that have it, copied on write like the tree. A query combines
// the sets its filters name, and reads only the fleets they leave: a
// label selector over 10 000 fleets reads the page it answers, not every
// fleet.
//
// A view that follows a Checker (firestoredb's Store and Partition, and a
// fleetfeed Follower of them) compares each cluster with the store every
// CheckInterval — its count of live fleets and the sum of their
// docIDHash, one aggregation billed a read per 1 000 fleets — and reads a
// cluster again when it disagreed at two checks in a row. Its listener or
// feed delivers every write, and the checks find what drifted all the
// same (a fleet gone without a tombstone it heard), so it loads
// everything only every FollowResync rather than every Resync.
//
// The view records its changes in a bounded feed, which each snapshot
// holds as it was at its publication. Watches (Watcher) follow the feed of
// the newest snapshot: a watch of any filter costs no read of the store,
// and one that falls behind is sent the newest state of what changed, not
// a queue of the states between.
package fleetview
