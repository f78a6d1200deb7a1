package emulatortests

import (
	"fmt"
	"math"
	"path"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/functions/ingest"
)

// TestAClusterCannotWriteAnother: what one cluster's publisher (or anyone
// holding its account) sends through its own topic can change nothing of
// another cluster — even a snapshot claiming the victim with the largest
// term, no fleets and a heartbeat from year 9000 — and a term or time no
// honest clock produces is refused on the cluster's own topic too.
func TestAClusterCannotWriteAnother(t *testing.T) {
	victim := newPipeline(t)
	attacker := newPipelineTo(t, victim.fn)
	require.Equal(t, "created", victim.publishAndWait(victim.upsert("ranked", 1, 4)))
	require.Equal(t, "reconciled", victim.publishAndWait(victim.snapshot(2, map[string]int64{"ranked": 1})))
	_, before := victim.clusterDoc()
	_, fleetBefore := victim.doc("ranked")

	forged := victim.snapshot(3, nil) // claims the victim's cluster
	forged.Version.Term = math.MaxInt64
	forged.ObservedAt = fleet.MicrosOf(time.Date(9000, 1, 1, 0, 0, 0, 0, time.UTC))
	lines := attacker.fn.logs.waitMessage(t, attacker.publish(forged), dropped)
	assert.Equal(t, ingest.DropForeignCluster, reasonCodeOf(lines))
	assert.Equal(t, attacker.topicID, path.Base(fmt.Sprint(lines[0]["topic"])), "the drop names the topic")
	assert.Equal(t, victim.cluster, lines[0]["cluster"], "and the claimed cluster")
	assert.NotNil(t, lines[0]["droppedTotal"], "and counts")

	// The same forgery through the victim's own topic fails on its clock.
	lines = victim.fn.logs.waitMessage(t, victim.publish(forged), dropped)
	assert.Equal(t, ingest.DropClockSkew, reasonCodeOf(lines))
	future := victim.upsert("ranked", 4, 0)
	future.Version.Term = time.Now().Add(time.Hour).UnixMilli()
	lines = victim.fn.logs.waitMessage(t, victim.publish(future), dropped)
	assert.Equal(t, ingest.DropClockSkew, reasonCodeOf(lines))

	_, after := victim.clusterDoc()
	assert.Equal(t, before.UpdateTime, after.UpdateTime, "the victim's cluster document is untouched")
	d, fleetAfter := victim.doc("ranked")
	assert.False(t, d.Deleted, "its fleet is still live")
	assert.Equal(t, fleetBefore.UpdateTime, fleetAfter.UpdateTime)

	// The victim's own next snapshot is still taken.
	assert.Equal(t, "reconciled", victim.publishAndWait(victim.snapshot(5, map[string]int64{"ranked": 1})))
}

func reasonCodeOf(lines []map[string]any) string {
	for _, l := range lines {
		if c, ok := l["reasonCode"].(string); ok {
			return c
		}
	}
	return ""
}
