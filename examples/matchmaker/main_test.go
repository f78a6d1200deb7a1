package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/emulator"
)

func TestRoutesPlayersToTheBestFleet(t *testing.T) {
	project := emulator.ProjectID(t)
	store := firestoredb.New(emulator.Firestore(t, project), time.Hour, time.Now)
	seq := int64(0)
	apply := func(ev fleet.Event) {
		seq++
		ev.SchemaVersion, ev.Version, ev.ObservedAt, ev.Publisher = fleet.SchemaVersion, fleet.Version{Term: 1, Seq: seq}, fleet.MicrosOf(time.Now()), fleet.Publisher{ID: "p"}
		_, err := store.Apply(t.Context(), ev)
		require.NoError(t, err)
	}
	part := fleet.SplitSnapshot(nil, fleet.DefaultSnapshotPartBytes)[0]
	apply(fleet.Event{Kind: fleet.KindSnapshot, Cluster: "eu", Snapshot: part})
	for _, f := range []struct {
		name, platform, version string
		ready                   int64
	}{{"pc-a", "pc", "1.42", 3}, {"pc-b", "pc", "1.42", 7}, {"ps5", "ps5", "1.42", 9}} {
		apply(fleet.Event{Kind: fleet.KindUpsert, Cluster: "eu", Namespace: "games", Name: f.name, Fleet: fleet.State{
			UID: "u", Labels: map[string]string{"platform": f.platform, "app.kubernetes.io/version": f.version},
			Status: fleet.Status{ReadyReplicas: f.ready},
		}})
	}
	var out bytes.Buffer
	in := strings.NewReader("alice pc 1.42\nbob ps5 1.42\ncarol pc 1.40\nbad line\n")
	err := run(t.Context(), nil, func(k string) string { return map[string]string{"GOOGLE_CLOUD_PROJECT": project}[k] }, in, &out, &out)
	require.NoError(t, err)
	assert.Equal(t, `watching 3 fleets
alice (pc 1.42) -> eu/games/pc-b (7 ready)
bob (ps5 1.42) -> eu/games/ps5 (9 ready)
carol (pc 1.40): no fleet with capacity; queueing
skipping "bad line": want NAME PLATFORM VERSION
`, out.String())
}
