package emulatortests

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/proc"
)

// TestTheIngestServiceLosesNothingAcrossItsRestarts runs cmd/fleetcast-ingest
// (Terraform's ingest_mode = "service") behind a push subscription of the
// Pub/Sub emulator, as Cloud Run runs it, and stops it (SIGINT, as Cloud Run
// sends SIGTERM) while a burst of pushes is in flight. Events published
// while it is down, duplicates and older states among them, are delivered
// again once it is back on its address: every fleet ends at its newest
// state, and no older state overwrote a newer one.
func TestTheIngestServiceLosesNothingAcrossItsRestarts(t *testing.T) {
	host := emulator.Host(t, emulator.FirestoreHostEnv)
	bin := filepath.Join(t.TempDir(), "fleetcast-ingest")
	require.NoError(t, proc.Build(t.Context(), "", "github.com/fleetcast/fleetcast/cmd/fleetcast-ingest", bin))
	port, err := proc.FreePort()
	require.NoError(t, err)
	start := func() *function {
		t.Helper()
		svc, err := startServing("fleetcast-ingest", bin, port, []string{"PORT=" + port, "HOST=127.0.0.1",
			"GOOGLE_CLOUD_PROJECT=" + project, emulator.FirestoreHostEnv + "=" + host, "EVENT_TIMEOUT=3s", "LOG_LEVEL=DEBUG"})
		require.NoError(t, err)
		t.Cleanup(svc.stop)
		return svc
	}
	svc := start()
	p := newPipelineTo(t, svc)

	var names []string
	for i := range 12 {
		names = append(names, fmt.Sprintf("fleet-%02d", i))
	}
	publishAll := func(seq int64) {
		for _, n := range names {
			p.publish(p.upsert(n, seq, seq))
		}
	}
	at := func(seq int64) func(string, *fleet.Document) bool {
		return func(_ string, d *fleet.Document) bool {
			return d != nil && d.Version.Seq == seq && d.Status != nil && d.Status.ReadyReplicas == seq
		}
	}
	publishAll(1)
	p.waitFleets("the first states", names, at(1))

	// A burst in flight, then the stop.
	publishAll(2)
	svc.stop()
	// While it is down: newer states, then a duplicate and an older one
	// of each.
	publishAll(3)
	publishAll(3)
	publishAll(2)
	start()
	p.waitFleets("the states published while it was down", names, at(3))
	publishAll(4)
	publishAll(1)
	p.waitFleets("the newest states after the restart", names, at(4))
}
