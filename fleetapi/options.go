package fleetapi

import (
	"encoding/json"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetview"
)

// Defaults of Options: the view engine's (package fleetview), and the
// watches'.
const (
	// DefaultStaleAfter: a cluster whose last heartbeat is older is
	// stale, and its fleets are left out unless asked for.
	DefaultStaleAfter = fleetview.DefaultStaleAfter
	// DefaultClusterRefresh is how often a view reads the cluster
	// documents written since its last read of them.
	DefaultClusterRefresh = fleetview.DefaultClusterRefresh
	// DefaultCommitLag bounds how long after its server timestamp a
	// write may become visible to queries.
	DefaultCommitLag = fleetview.DefaultCommitLag
	// DefaultMaxStaleness: see Options.MaxStaleness.
	DefaultMaxStaleness = fleetview.DefaultMaxStaleness
	// DefaultMaxViewBytes bounds the view's fleet documents.
	DefaultMaxViewBytes = fleetview.DefaultMaxViewBytes
	// DefaultMaxWatches is how many watches an instance serves at once.
	DefaultMaxWatches = fleetview.DefaultMaxWatches
	// DefaultResync is how often a view loads everything again.
	DefaultResync = fleetview.DefaultResync
	// DefaultFollowResync replaces DefaultResync while the view follows
	// its listener or the change feed, and DefaultCheckInterval is how
	// often it then checks each cluster against the store.
	DefaultFollowResync  = fleetview.DefaultFollowResync
	DefaultCheckInterval = fleetview.DefaultCheckInterval
	// DefaultWatchPoll is how often a view with watches syncs when no
	// listener delivers the writes.
	DefaultWatchPoll = fleetview.DefaultWatchPoll
	// DefaultFeedMaxBytes bounds the documents the feed of changes keeps
	// alive.
	DefaultFeedMaxBytes = fleetview.DefaultFeedMaxBytes
	// DefaultHeartbeat is how often a watch sends a heartbeat.
	DefaultHeartbeat = 15 * time.Second
)

// StepEvents bounds the events a watch takes from the view at a time.
const StepEvents = fleetview.StepEvents

// Source is what a view reads (fleetview.Source).
type Source = fleetview.Source

// Follower is a Source with a realtime listener (fleetview.Follower).
type Follower = fleetview.Follower

// Options configure a Service; zero fields take their defaults. The
// view's are fleetview.Options'.
type Options struct {
	// StaleAfter: a cluster whose heartbeat is older is stale.
	StaleAfter time.Duration
	// MaxStaleness: an answer comes from the view's newest snapshot at
	// once; the view syncs in the background once that is older than
	// half of this, and a request waits only when nothing was syncing a
	// view older than this (an idle instance). Negative: every request
	// waits for a sync that begins after it arrived (read-your-writes).
	MaxStaleness time.Duration
	// ClusterRefresh bounds how old the view's cluster documents
	// (heartbeats, labels, totals) may be when it answers: they are
	// read again at most this often. Negative: at every sync.
	ClusterRefresh time.Duration
	// CommitLag is how long after its server timestamp (writtenAt) a
	// write may become visible to queries, plus how far the Service's
	// clock may be ahead of Firestore's.
	CommitLag time.Duration
	// Resync is how often the view loads everything again.
	Resync time.Duration
	// TombstoneRetention is how long Firestore keeps a tombstone.
	TombstoneRetention time.Duration
	// WatchPoll is how often the view syncs while watches run and no
	// listener delivers the writes.
	WatchPoll time.Duration
	// Heartbeat is how often a watch sends a heartbeat.
	Heartbeat time.Duration
	// HeavySlots is how many heavy reads (Service.Admit) run at once
	// (DefaultHeavySlots); HeavyQueue how many may wait for one
	// (DefaultHeavyQueue), and HeavyWait for how long (DefaultHeavyWait).
	HeavySlots int
	HeavyQueue int
	HeavyWait  time.Duration
	// SyncTimeout bounds one sync (default 30 s).
	SyncTimeout time.Duration
	// MaxViewBytes bounds the fleet documents the view holds
	// (DefaultMaxViewBytes). Past it, the cluster whose fleets take the
	// most is left out and reported stale until the next full load
	// finds room for it: one cluster creating fleets without end cannot
	// exhaust the instance that answers for all.
	MaxViewBytes int
	// FeedMaxBytes bounds the documents the feed of changes keeps alive
	// (DefaultFeedMaxBytes); a watch further behind restarts.
	FeedMaxBytes int
	// MaxWatches bounds the watches (streams) an instance serves at
	// once; past it, Watch refuses with ResourceExhausted
	// (DefaultMaxWatches).
	MaxWatches int
	// Clusters, when set, are the clusters this Service's view holds: a
	// partition of a deployment too large for one instance
	// (docs/capacity.md), whose Source reads those clusters' documents
	// only (firestoredb.Store.Partition; the query side's VIEW_CLUSTERS).
	// The view admits no document of another cluster, whatever its
	// Source returns, and a request that names one is refused
	// (InvalidArgument, param "cluster"), naming the partition's: it was
	// sent to the wrong instance. Empty: every cluster.
	Clusters []string
	// Policy is the placement policy of a Place request that gives none
	// (the query side's PLACEMENT_POLICY); the zero Policy gives every
	// cluster priority 0 and weight 1.
	Policy Policy
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Log receives the view's loads and skipped documents; none when nil.
	Log *slog.Logger

	// stepEvents is StepEvents (tests make it smaller).
	stepEvents int
}

// view returns the engine's options.
func (o Options) view() fleetview.Options {
	return fleetview.Options{
		StaleAfter: o.StaleAfter, MaxStaleness: o.MaxStaleness, ClusterRefresh: o.ClusterRefresh, CommitLag: o.CommitLag,
		Resync: o.Resync, TombstoneRetention: o.TombstoneRetention, WatchPoll: o.WatchPoll, SyncTimeout: o.SyncTimeout,
		MaxViewBytes: o.MaxViewBytes, FeedMaxBytes: o.FeedMaxBytes, MaxWatches: o.MaxWatches, StepEvents: o.stepEvents,
		Clusters: o.Clusters, Shown: shownHash, Now: o.Now, Log: o.Log,
	}
}

// shownHash hashes what the API shows of a cluster's document but its
// staleness: its heartbeat time, fleet count, totals, labels, publisher.
func shownHash(c *fleet.ClusterDocument) uint64 {
	b, _ := json.Marshal(NewCluster(c, false)) // plain data: cannot fail
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}
