package fleetmetrics_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetapi/fleetmetrics"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
)

// TestTheCacheComputesOncePerVersion: eight scrapers of one version of
// the view cost one computation of the fleets' figures, and each scrape
// answers what an uncached Collect does, in every format, with the
// clusters' heartbeat ages of its own time; a change of the view is one
// computation more.
func TestTheCacheComputesOncePerVersion(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	mem := fleetapitest.NewMemory(clock)
	mem.PutCluster(fleet.ClusterDocument{Cluster: "pc", Labels: map[string]string{}, SnapshotVersion: fleet.Version{Term: 1, Seq: 1},
		SnapshotParts: 1, IngestedAt: now, HeartbeatAt: now, FleetCount: 20})
	put := func(i int, ready int64) {
		mem.PutFleet(fleet.Document{Cluster: "pc", Namespace: "games", Name: fmt.Sprintf("f%02d", i), UID: "u",
			Version: fleet.Version{Term: 1, Seq: int64(100*ready + int64(i) + 2)}, Labels: map[string]string{"platform": "pc"},
			Spec:   &fleet.Spec{Replicas: 10},
			Status: &fleet.DocStatus{Replicas: 10, ReadyReplicas: ready, Counters: map[string]fleet.DocAggregate{"rooms": {Capacity: 10, Available: 6}}}})
	}
	for i := range 20 {
		put(i, 1)
	}
	svc := fleetapi.NewService(mem, fleetapi.Options{MaxStaleness: -1, ClusterRefresh: -1, Now: clock})
	opts := fleetmetrics.Options{Labels: []string{"platform"}}
	cache := fleetmetrics.NewCache(opts)
	scrape := func(format expfmt.Format) (cached, fresh string) {
		var a, b bytes.Buffer
		require.NoError(t, svc.Read(t.Context(), func(r *fleetapi.Read) error {
			require.NoError(t, cache.Collect(r).Write(&a, format))
			return fleetmetrics.Collect(r, opts).Write(&b, format)
		}))
		return a.String(), b.String()
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for _, f := range []expfmt.Format{expfmt.NewFormat(expfmt.TypeTextPlain), expfmt.NewFormat(expfmt.TypeOpenMetrics), expfmt.NewFormat(expfmt.TypeProtoDelim)} {
				cached, fresh := scrape(f)
				assert.Equal(t, fresh, cached, "%s: the cached answer is the computed one", f)
			}
		})
	}
	wg.Wait()
	assert.EqualValues(t, 1, cache.Computations(), "eight scrapers of one version: one computation")

	mu.Lock()
	now = now.Add(7 * time.Second)
	mu.Unlock()
	cached, _ := scrape(expfmt.NewFormat(expfmt.TypeTextPlain))
	assert.Contains(t, cached, `fleetcast_cluster_heartbeat_age_seconds{cluster="pc"} 7`, "the heartbeat's age is the scrape's")
	assert.EqualValues(t, 1, cache.Computations(), "the clock alone changes no fleet figure")

	put(3, 5)
	cached, _ = scrape(expfmt.NewFormat(expfmt.TypeTextPlain))
	assert.Contains(t, cached, `fleetcast_fleet_ready_replicas{cluster="pc",namespace="games",fleet="f03",label_platform="pc"} 5`)
	assert.EqualValues(t, 2, cache.Computations(), "a change: one computation more")
}

// TestTheGzipAnswerIsOneMemberOfTheWholeAnswer: a gzipped scrape is one
// gzip member (the standard library's reader checks its CRC and length)
// that holds what Write writes, in every format; scrapes of one version
// share its first part, the fleets' families compressed once, and each
// carries its own clusters' figures.
func TestTheGzipAnswerIsOneMemberOfTheWholeAnswer(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	mem := fleetapitest.NewMemory(clock)
	mem.PutCluster(fleet.ClusterDocument{Cluster: "pc", Labels: map[string]string{}, SnapshotVersion: fleet.Version{Term: 1, Seq: 1},
		SnapshotParts: 1, IngestedAt: now, HeartbeatAt: now, FleetCount: 500})
	for i := range 500 {
		mem.PutFleet(fleet.Document{Cluster: "pc", Namespace: "games", Name: fmt.Sprintf("f%03d", i), UID: "u",
			Version: fleet.Version{Term: 1, Seq: int64(i + 2)}, Labels: map[string]string{"platform": "pc"},
			Spec: &fleet.Spec{Replicas: 10}, Status: &fleet.DocStatus{Replicas: 10, ReadyReplicas: int64(i % 7)}})
	}
	svc := fleetapi.NewService(mem, fleetapi.Options{MaxStaleness: -1, ClusterRefresh: -1, Now: clock})
	cache := fleetmetrics.NewCache(fleetmetrics.Options{Labels: []string{"platform"}})
	scrape := func(format expfmt.Format) (parts [][]byte, plain string) {
		var b bytes.Buffer
		require.NoError(t, svc.Read(t.Context(), func(r *fleetapi.Read) error {
			snap := cache.Collect(r)
			var err error
			parts, err = snap.Gzip(format)
			require.NoError(t, err)
			return snap.Write(&b, format)
		}))
		return parts, b.String()
	}
	gunzip := func(parts [][]byte) string {
		whole := bytes.NewReader(bytes.Join(parts, nil))
		zr, err := gzip.NewReader(whole)
		require.NoError(t, err)
		zr.Multistream(false)
		got, err := io.ReadAll(zr)
		require.NoError(t, err, "a valid member: its CRC and length check")
		assert.Zero(t, whole.Len(), "one member, and nothing after it")
		return string(got)
	}
	for _, f := range []expfmt.Format{expfmt.NewFormat(expfmt.TypeTextPlain), expfmt.NewFormat(expfmt.TypeOpenMetrics), expfmt.NewFormat(expfmt.TypeProtoDelim)} {
		first, plain := scrape(f)
		assert.Equal(t, plain, gunzip(first), "%s: the gzipped answer holds the answer", f)

		mu.Lock()
		now = now.Add(3 * time.Second)
		mu.Unlock()
		second, plain2 := scrape(f)
		assert.NotEqual(t, plain, plain2, "%s: the clusters' figures are the scrape's own", f)
		assert.Equal(t, plain2, gunzip(second), "%s", f)
		assert.Same(t, &first[0][0], &second[0][0], "%s: scrapes of a version share the fleets' compressed part", f)
	}
	assert.EqualValues(t, 1, cache.Computations())
}
