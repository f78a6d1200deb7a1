package emulatortests

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/publisher"
)

var (
	churnRates = flag.String("churn.rates", "1,2,5,10,20,50",
		"BenchmarkCoalescingByChurn: the status changes per fleet per second to measure, comma-separated")
	churnWindow = flag.Duration("churn.window", 20*time.Second, "BenchmarkCoalescingByChurn: how long each rate churns")
)

// BenchmarkCoalescingByChurn measures coalescing as a function of churn:
// for each rate of -churn.rates, fleets of 100 servers change that many
// times per second each for -churn.window (10 fleets, fewer past 20
// changes a second, to stay within the 200 patches a second this API
// server takes: the ratio is per fleet), watched by fleetcast (the
// real publisher at its defaults, in-process, and the ingest core on the
// Firestore emulator) and by the baseline broadcaster of
// BenchmarkCoalescingVsBroadcast side by side. The ratio is the baseline's
// event messages (its periodic republish left out) over fleetcast's fleet
// messages (its snapshots left out): what one change costs each, which is
// the changes per fleet per minimum interval. The churn achieved counts
// the changes the API server made (watch events), not the patches sent. At the end both Firestore
// views must equal the API server's fleets.
func BenchmarkCoalescingByChurn(b *testing.B) {
	c := controlplane.Require(b, cp, cpErr)
	emulator.Host(b, emulator.FirestoreHostEnv)
	for _, field := range strings.Split(*churnRates, ",") {
		rate, err := strconv.ParseFloat(strings.TrimSpace(field), 64)
		require.NoError(b, err, "-churn.rates")
		require.Positive(b, rate, "-churn.rates")
		b.Run(fmt.Sprintf("churn=%g", rate), func(b *testing.B) {
			for range b.N {
				benchmarkChurn(b, c, rate)
			}
		})
	}
}

// churnPatchBudget is the patches per second the sweep asks of the API
// server at most, over all its fleets.
const churnPatchBudget = 200

func benchmarkChurn(b *testing.B, c *controlplane.ControlPlane, rate float64) {
	fleets := min(churnFleets, max(2, int(churnPatchBudget/rate)))
	ns := kubetest.NewNamespace(b, c)
	const cluster = "churn"
	ours := &fleetcastSide{countingStore: countingStore{store: firestoredb.New(emulator.Firestore(b, emulator.ProjectID(b)), time.Hour, time.Now)}}
	base := newBroadcaster(firestoredb.New(emulator.Firestore(b, emulator.ProjectID(b)), time.Hour, time.Now), 4)
	for i := range fleets {
		name := fmt.Sprintf("churn-%d", i)
		ns.CreateFleet(ns.Name, name, nil)
		ns.SetStatus(ns.Name, name, map[string]any{"replicas": int64(churnServers), "readyReplicas": int64(churnServers)})
	}
	cfg := kubetest.Config(cluster, ns.Name)
	def := publisher.DefaultConfig() // the deployed intervals, not the tests' quick ones
	cfg.MinInterval, cfg.SnapshotInterval, cfg.RefreshInterval = def.MinInterval, def.SnapshotInterval, def.RefreshInterval
	kubetest.StartPublisher(b, cfg, c.RESTConfig(), ours)
	stopBaseline := base.follow(b, ns, cfg.Projection, cluster, baselineRepublish)
	letTimePass(2 * cfg.MinInterval) // both have published the fleets once

	ourMsgs, ourWrites := ours.upserts.Load(), ours.writes.Load()
	baseMsgs, baseRepublished, baseWrites := base.messages.Load(), base.republished.Load(), base.writes.Load()
	b.ResetTimer()
	patches, elapsed := churn(ns, fleets, rate, *churnWindow, 1)
	letTimePass(2 * cfg.MinInterval) // the trailing publishes
	b.StopTimer()
	stopBaseline()
	require.NoError(b, base.close())
	requireViewsMatch(b, ns, cfg.Projection, cluster, fleets, map[string]*firestoredb.Store{"fleetcast": ours.store, "baseline": base.store})

	fc := float64(ours.upserts.Load() - ourMsgs)
	bl := float64((base.messages.Load() - baseMsgs) - (base.republished.Load() - baseRepublished))
	// A change is what the API server made of a patch: a patch that
	// leaves the status as it was (two patchers of a fleet crossing) is
	// none, and no watch event; the baseline sends one per event.
	achieved := bl / float64(fleets) / elapsed.Seconds()
	b.Logf("churn %g/s per fleet (%.1f achieved): baseline %.0f event messages, fleetcast %.0f fleet messages", rate, achieved, bl, fc)
	b.ReportMetric(rate, "churn-per-fleet-s")
	b.ReportMetric(achieved, "churn-achieved-per-fleet-s")
	b.ReportMetric(float64(patches), "patches")
	b.ReportMetric(bl, "baseline-msgs")
	b.ReportMetric(fc, "fleetcast-msgs")
	b.ReportMetric(bl/fc, "msgs-ratio")
	b.ReportMetric(float64(base.writes.Load()-baseWrites)/float64(ours.writes.Load()-ourWrites), "writes-ratio")
	b.ReportMetric(float64(fleets), "fleets")
	b.ReportMetric(churnWindow.Seconds(), "window-s")
	b.ReportMetric(cfg.MinInterval.Seconds(), "min-interval-s")
}
