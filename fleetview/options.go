package fleetview

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/fleetcast/fleetcast/fleet"
)

// Source is what a view reads: every live fleet and cluster once, then the
// documents written since a point, tombstones included.
// firestoredb.Store is the Source of a deployment.
type Source interface {
	// LiveFleets calls each with every live fleet, in document ID order,
	// as it reads them, and returns the IDs of those it cannot decode.
	LiveFleets(ctx context.Context, each func(*fleet.Document)) ([]string, error)
	Clusters(ctx context.Context) (fleet.Page[fleet.ClusterDocument], error)
	FleetsWrittenSince(ctx context.Context, since time.Time) (fleet.Page[fleet.Document], error)
	ClustersWrittenSince(ctx context.Context, since time.Time) (fleet.Page[fleet.ClusterDocument], error)
}

// A Follower is a Source that can also deliver the fleet documents
// written at or after a point as they commit, as a Firestore realtime
// listener does: a view that follows it while watches run reads each
// write once, where polling reads it again at every poll within
// CommitLag of it. FollowFleets calls apply with the documents there when
// it starts, then with each change, and with the read time (Firestore's
// clock) before which every write had been delivered. It returns nil
// when ctx ends, and the error that stopped it otherwise.
type Follower interface {
	Source
	FollowFleets(ctx context.Context, since time.Time, apply func(fleet.Page[fleet.Document], time.Time)) error
}

// Defaults of Options.
const (
	// DefaultStaleAfter is three default snapshot intervals of a
	// publisher: a cluster whose last heartbeat is older is stale.
	DefaultStaleAfter = 90 * time.Second
	// DefaultClusterRefresh is how often a view reads the cluster
	// documents written since its last read of them.
	DefaultClusterRefresh = time.Second
	// DefaultCommitLag bounds how long after its server timestamp a
	// write may become visible to queries. The Firestore emulator
	// showed up to 13 ms with four concurrent writers (docs/api.md).
	DefaultCommitLag = 250 * time.Millisecond
	// DefaultMaxStaleness: see Options.MaxStaleness.
	DefaultMaxStaleness = 250 * time.Millisecond
	// DefaultMaxViewBytes bounds the view's fleet documents (DocBytes):
	// 10 000 fleets at fleet.MaxStateBytes take about 110 MiB, a typical
	// fleet a tenth of one of those.
	DefaultMaxViewBytes = 160 << 20
	// DefaultResync is how often a view loads everything again, which
	// bounds the life of any change it missed (a write that became
	// visible later than CommitLag, or a clock off by more).
	DefaultResync = 15 * time.Minute
	// DefaultFollowResync is how often a view that follows a Checker
	// loads everything again: its listener or feed delivers every write,
	// and its checks find a cluster that drifted all the same.
	DefaultFollowResync = 6 * time.Hour
	// DefaultCheckInterval is how often a view that follows a Checker
	// compares each cluster's count of live fleets (and the sum of their
	// docIDHash) with the store's.
	DefaultCheckInterval = 5 * time.Minute
	// DefaultWatchPoll is how often a view with watches reads what was
	// written since its last sync, and judges the clusters' staleness,
	// unless a listener delivers the writes (see Follower).
	DefaultWatchPoll = 250 * time.Millisecond
	// DefaultMaxWatches is how many watches an instance serves at once:
	// each holds at most a chunk of StepEvents events, a few KiB of
	// buffers and the socket's (BENCHMARKS.md measures them), so that
	// with the view they stay well inside a 512 MiB instance.
	DefaultMaxWatches = 500
	// DefaultSyncTimeout bounds one sync round.
	DefaultSyncTimeout = 30 * time.Second
)

// StepEvents bounds the events a watch takes from a snapshot at a time: a
// step larger than this (the initial set of a large view) is sent a chunk
// at a time, so that a stream holds one chunk, however many fleets match,
// and however slowly its client reads.
const StepEvents = 256

// Options configure an Engine; zero fields take their defaults.
type Options struct {
	// StaleAfter: a cluster whose heartbeat is older is stale.
	StaleAfter time.Duration
	// MaxStaleness: a read whose snapshot began its sync more than half
	// of this ago starts a round in the background, and one on an idle
	// instance (no round under way) whose snapshot is older than this
	// waits for the round it starts. Negative: every read is strict,
	// and waits for a round that begins after it (read-your-writes).
	MaxStaleness time.Duration
	// ClusterRefresh bounds how old the view's cluster documents may be:
	// they are read again at most this often. Negative: at every round.
	ClusterRefresh time.Duration
	// CommitLag is how long after its server timestamp (writtenAt) a
	// write may become visible to queries, plus how far the engine's
	// clock may be ahead of Firestore's: each round reads again what was
	// stamped within CommitLag before the previous one.
	CommitLag time.Duration
	// Resync is how often the view loads everything again.
	Resync time.Duration
	// FollowResync replaces Resync while the view follows a Source that
	// is a Checker (see Checker); CheckInterval is how often it checks.
	FollowResync, CheckInterval time.Duration
	// TombstoneRetention is how long Firestore keeps a tombstone: a view
	// that has not synced for half of it loads everything again.
	TombstoneRetention time.Duration
	// WatchPoll is how often the view syncs while watches run and no
	// listener delivers the writes.
	WatchPoll time.Duration
	// SyncTimeout bounds one round.
	SyncTimeout time.Duration
	// MaxViewBytes bounds the fleet documents the view holds, by
	// DocBytes. Past it, the cluster whose fleets take the most is left
	// out and reported stale until the next full load finds room for it.
	MaxViewBytes int
	// FeedMaxBytes bounds the documents the feed of changes keeps alive;
	// a watch further behind restarts.
	FeedMaxBytes int
	// MaxWatches bounds the watches an engine serves at once.
	MaxWatches int
	// StepEvents bounds the events of one step of a watch (StepEvents).
	StepEvents int
	// Clusters, when set, are the clusters the view holds (a partition):
	// it admits no document of another, whatever its Source returns.
	Clusters []string
	// Shown hashes what the API shows of a cluster's document but its
	// staleness: a watch hears of a cluster when it changes. The
	// document's versions and times when nil.
	Shown func(*fleet.ClusterDocument) uint64
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Log receives the view's loads, failed rounds and skipped
	// documents; none when nil.
	Log *slog.Logger
}

// WithDefaults returns o with every zero field at its default.
func (o Options) WithDefaults() Options {
	if o.StaleAfter <= 0 {
		o.StaleAfter = DefaultStaleAfter
	}
	switch {
	case o.MaxStaleness == 0:
		o.MaxStaleness = DefaultMaxStaleness
	case o.MaxStaleness < 0:
		o.MaxStaleness = -1
	}
	switch {
	case o.ClusterRefresh == 0:
		o.ClusterRefresh = DefaultClusterRefresh
	case o.ClusterRefresh < 0:
		o.ClusterRefresh = -1
	}
	if o.CommitLag <= 0 {
		o.CommitLag = DefaultCommitLag
	}
	if o.Resync <= 0 {
		o.Resync = DefaultResync
	}
	if o.FollowResync <= 0 {
		o.FollowResync = DefaultFollowResync
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	if o.TombstoneRetention <= 0 {
		o.TombstoneRetention = fleet.DefaultTombstoneRetention
	}
	if o.WatchPoll <= 0 {
		o.WatchPoll = DefaultWatchPoll
	}
	if o.SyncTimeout <= 0 {
		o.SyncTimeout = DefaultSyncTimeout
	}
	if o.MaxViewBytes <= 0 {
		o.MaxViewBytes = DefaultMaxViewBytes
	}
	if o.FeedMaxBytes <= 0 {
		o.FeedMaxBytes = DefaultFeedMaxBytes
	}
	if o.MaxWatches <= 0 {
		o.MaxWatches = DefaultMaxWatches
	}
	if o.StepEvents <= 0 {
		o.StepEvents = StepEvents
	}
	if len(o.Clusters) > 0 {
		o.Clusters = slices.Compact(slices.Sorted(slices.Values(o.Clusters)))
	}
	if o.Shown == nil {
		o.Shown = clusterHash
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// strict reports whether every read waits for a round that begins after
// it.
func (o Options) strict() bool { return o.MaxStaleness < 0 }

// clusterRefresh is ClusterRefresh, 0 for every round.
func (o Options) clusterRefresh() time.Duration { return max(0, o.ClusterRefresh) }
