package firestoredb_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
)

// BenchmarkApply measures the ingest core against the Firestore emulator:
// events per second and documents written per event.
func BenchmarkApply(b *testing.B) {
	for _, bc := range []struct {
		name    string
		workers int
		repeat  bool // re-apply the same event: a redelivery
		// uncached: without the version cache, as an instance that has
		// not seen the document (every upsert reads it first).
		uncached bool
	}{
		{"changed/sequential", 1, false, false},
		{"changed/8-workers", 8, false, false},
		{"unchanged-repeat/sequential", 1, true, false},
		{"unchanged-repeat/8-workers", 8, true, false},
		{"changed/sequential/uncached", 1, false, true},
		{"unchanged-repeat/sequential/uncached", 1, true, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var rpcs emulator.RPCs
			s := firestoredb.New(emulator.Firestore(b, emulator.ProjectID(b), rpcs.FirestoreOptions(b)...), time.Hour, time.Now)
			if bc.uncached {
				s.WithVersionCache(0, 0)
			}
			ctx := b.Context()
			// One fleet per worker: distinct documents, no contention.
			for w := range bc.workers {
				_, err := s.Apply(ctx, upsert(fmt.Sprintf("f%d", w), 1, 1, 1))
				require.NoError(b, err)
			}
			var mu sync.Mutex
			writes := 0
			var next [64]int64
			work := make(chan int)
			var wg sync.WaitGroup
			b.ResetTimer()
			for w := range bc.workers {
				wg.Go(func() {
					for range work {
						seq := int64(1)
						if !bc.repeat {
							next[w]++
							seq = next[w] + 1
						}
						res, err := s.Apply(ctx, upsert(fmt.Sprintf("f%d", w), 1, seq, seq))
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						writes += res.Writes
						mu.Unlock()
					}
				})
			}
			rpcs.Take()
			reads := s.Billing().Reads[firestoredb.CauseApply]
			for i := range b.N {
				work <- i
			}
			close(work)
			wg.Wait()
			b.StopTimer()
			calls := 0
			for _, n := range rpcs.Take() {
				calls += n
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(writes)/float64(b.N), "writes/event")
			b.ReportMetric(float64(calls)/float64(b.N), "rpcs/event")
			b.ReportMetric(float64(s.Billing().Reads[firestoredb.CauseApply]-reads)/float64(b.N), "reads/event")
		})
	}
}

// BenchmarkReconcile measures one snapshot part over 1 000 live fleets that
// it all lists: the steady-state heartbeat, which reads every document in
// the range and writes none of them.
func BenchmarkReconcile(b *testing.B) {
	s, _ := newStore(b)
	s.WithFullReconcileEvery(1) // the range read, every part
	ctx := b.Context()
	const n = 1000
	var entries []fleet.SnapshotEntry
	bw := s.Client().BulkWriter(ctx)
	for i := range n {
		ev := upsert(fmt.Sprintf("f%04d", i), 1, int64(i+1), 1)
		d, _ := fleet.ApplyFleetEvent(nil, ev, time.Now(), time.Hour)
		_, err := bw.Set(s.FleetRef(ev.Key()), d)
		require.NoError(b, err)
		entries = append(entries, fleet.SnapshotEntry{Namespace: "default", Name: ev.Name, Version: ev.Version})
	}
	bw.End()
	parts := fleet.SplitSnapshot(entries, fleet.DefaultSnapshotPartBytes)
	require.Equal(b, 1, len(parts))
	b.ResetTimer()
	for i := range b.N {
		res, err := s.Apply(ctx, snapshot(2, int64(i), parts, 0))
		require.NoError(b, err)
		require.Zero(b, res.Tombstoned)
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "fleets/s")
}

// BenchmarkReconcileReads measures what one snapshot part of 1 000 fleets
// costs when nothing diverged: with its aggregation (the default path) and
// with the range read (one part in FULL_RECONCILE_EVERY, and every part
// before), in billed reads per part, the cluster document's included.
func BenchmarkReconcileReads(b *testing.B) {
	for _, bc := range []struct {
		name  string
		every int
	}{{"aggregation", 1 << 30}, {"range-read", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			s, _ := newStore(b)
			s.WithFullReconcileEvery(bc.every)
			ctx := b.Context()
			parts := fleet.SplitSnapshot(applyFleets(b, s, 1000, "f%04d"), fleet.DefaultSnapshotPartBytes)
			require.Len(b, parts, 1)
			before := s.Billing()
			b.ResetTimer()
			for i := range b.N {
				res, err := s.Apply(ctx, snapshot(2, int64(i+1), parts, 0))
				require.NoError(b, err)
				require.Zero(b, res.Tombstoned)
			}
			after := s.Billing()
			b.ReportMetric(float64(after.Reads[firestoredb.CauseReconcile]-before.Reads[firestoredb.CauseReconcile])/float64(b.N), "reconcile-reads/part")
			b.ReportMetric(float64(after.Reads[firestoredb.CauseCluster]-before.Reads[firestoredb.CauseCluster])/float64(b.N), "cluster-reads/part")
		})
	}
}
