package emulatortests

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
)

// TestACounterRichClusterStillHeartbeats: fleets on the real API server
// that together name 1 021 counters, with capacities near math.MaxInt64
// (Agones allows them), still heartbeat through the whole pipeline: the
// totals saturate and keep the 1 000 largest names, and say so. (Each
// fleet keeps within fleet.MaxStateBytes: 60 counters.)
func TestACounterRichClusterStillHeartbeats(t *testing.T) {
	c := controlplane.Require(t, cp, cpErr)
	p := newPipeline(t)
	ns := kubetest.NewNamespace(t, c)
	p.nsName = ns.Name
	const fleets, perFleet = 17, 60
	var names []string
	for f := range fleets {
		name := fmt.Sprintf("rich-%02d", f)
		names = append(names, name)
		ns.CreateFleet(ns.Name, name, nil)
		counters := map[string]any{"shared": map[string]any{"count": int64(1), "capacity": int64(math.MaxInt64)}}
		for i := range perFleet - 1 {
			counters[fmt.Sprintf("c%02d-%03d", f, i)] = map[string]any{"count": int64(1), "capacity": int64(math.MaxInt64 - i)}
		}
		ns.SetStatus(ns.Name, name, map[string]any{"replicas": int64(3), "readyReplicas": int64(3), "counters": counters})
	}
	cfg := p.publisherConfig(ns.Name)
	cfg.SnapshotInterval = time.Second
	kubetest.StartPublisher(t, cfg, c.RESTConfig(), p.transport(""))
	p.waitFleets("every fleet lands whole", names, func(_ string, d *fleet.Document) bool {
		return d != nil && !d.Deleted && len(d.Status.Counters) == perFleet && d.Degraded == ""
	})

	var first time.Time
	eventually(t, "a heartbeat with truncated totals", func() bool {
		cl, _ := p.clusterDoc()
		if cl == nil || cl.FleetCount != fleets {
			return false
		}
		first = cl.IngestedAt
		return cl.TotalsTruncated
	})
	eventually(t, "heartbeats keep coming", func() bool {
		cl, _ := p.clusterDoc()
		return cl.IngestedAt.After(first)
	})
	cl, _ := p.clusterDoc()
	require.True(t, cl.TotalsTruncated)
	assert.Len(t, cl.Totals.Counters, 1000)
	assert.Equal(t, int64(math.MaxInt64), cl.Totals.Counters["shared"].Capacity, "saturated, not wrapped")
	assert.Equal(t, int64(fleets), cl.Totals.Counters["shared"].Count)
}

// TestAFleetThatCannotBePublishedWholeIsPublishedDegraded: on the real API
// server, a fleet whose included annotation outgrows its limit, and one
// whose 1 000 long counter names make its event too large, are published
// with those parts dropped and marked degraded — not dropped after their
// versions were stamped — and the snapshots vouch for what was sent.
func TestAFleetThatCannotBePublishedWholeIsPublishedDegraded(t *testing.T) {
	c := controlplane.Require(t, cp, cpErr)
	p := newPipeline(t)
	ns := kubetest.NewNamespace(t, c)
	p.nsName = ns.Name

	ns.CreateFleet(ns.Name, "annotated", map[string]string{"platform": "pc"})
	ns.Patch(ns.Name, "annotated", map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		"fleetcast.dev/notes": strings.Repeat("n", fleet.MaxAnnotationValue+1),
	}}})
	ns.CreateFleet(ns.Name, "counted", map[string]string{"platform": "pc"})
	counters := map[string]any{}
	for i := range fleet.MaxAggregates {
		counters[fmt.Sprintf("%0250d", i)] = map[string]any{"count": int64(1), "capacity": int64(math.MaxInt64)}
	}
	ns.SetStatus(ns.Name, "counted", map[string]any{"replicas": int64(3), "readyReplicas": int64(2), "counters": counters})

	cfg := p.publisherConfig(ns.Name)
	cfg.Projection.IncludeAnnotations = []string{"fleetcast.dev/*"}
	cfg.SnapshotInterval = time.Second
	kubetest.StartPublisher(t, cfg, c.RESTConfig(), p.transport(""))
	p.waitFleets("both published degraded", []string{"annotated", "counted"}, func(_ string, d *fleet.Document) bool {
		return d != nil && !d.Deleted && d.Degraded != ""
	})
	annotated, _ := p.doc("annotated")
	assert.Empty(t, annotated.Annotations)
	assert.Contains(t, annotated.Degraded, "dropped annotations")
	assert.Equal(t, "pc", annotated.Labels["platform"], "what fits stays")
	counted, _ := p.doc("counted")
	assert.Empty(t, counted.Status.Counters)
	assert.Equal(t, int64(2), counted.Status.ReadyReplicas)
	assert.Contains(t, counted.Degraded, "counters")

	// Snapshots list both at the versions sent: nothing is tombstoned.
	eventually(t, "a heartbeat of both fleets", func() bool {
		cl, _ := p.clusterDoc()
		return cl != nil && cl.FleetCount == 2 && cl.SnapshotVersion.Seq > counted.Version.Seq
	})
	for _, n := range []string{"annotated", "counted"} {
		d, _ := p.doc(n)
		assert.False(t, d.Deleted, n)
	}
}
