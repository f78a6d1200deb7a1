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
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
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
	}{{"pc-a", "pc", "1.41", 3}, {"pc-b", "pc", "1.42", 7}, {"ps5", "ps5", "1.42", 9}} {
		apply(fleet.Event{Kind: fleet.KindUpsert, Cluster: "eu", Namespace: "games", Name: f.name, Fleet: fleet.State{
			UID: "u", Labels: map[string]string{"platform": f.platform, "app.kubernetes.io/version": f.version},
			Status: fleet.Status{Replicas: f.ready, ReadyReplicas: f.ready},
		}})
	}
	var out bytes.Buffer
	// One fleet per platform and version: among several, Choose draws in
	// proportion to their rank (fleetwatch's tests check the shares).
	in := strings.NewReader("alice pc 1.42\nbob ps5 1.42\ncarol pc 1.40\nbad line\n")
	err := run(t.Context(), nil, func(k string) string { return map[string]string{"GOOGLE_CLOUD_PROJECT": project}[k] }, in, &out, &out)
	require.NoError(t, err)
	assert.Equal(t, `watching 3 fleets, ranking by ready
alice (pc 1.42) -> eu/games/pc-b (7 ready, ready 7)
bob (ps5 1.42) -> eu/games/ps5 (9 ready, ready 9)
carol (pc 1.40): no fleet with capacity; queueing
skipping "bad line": want NAME PLATFORM VERSION
`, out.String())

	// A preference no cluster meets falls back, and says so.
	out.Reset()
	err = run(t.Context(), []string{"--project", project, "--prefer", "region=us"}, func(string) string { return "" }, strings.NewReader("dave pc 1.42\n"), &out, &out)
	require.NoError(t, err)
	assert.Equal(t, `watching 3 fleets, ranking by ready
dave (pc 1.42) -> eu/games/pc-b (7 ready, ready 7, no preferred cluster had one)
`, out.String())
}

// TestBadConfigurationFailsLoudly: every mistake is an error naming it,
// before anything is read.
func TestBadConfigurationFailsLoudly(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "set --project or GOOGLE_CLOUD_PROJECT"},
		{[]string{"--project", "p", "--rank", "fastest"}, `--rank "fastest": want ready, players, counter=NAME or list=NAME`},
		{[]string{"--project", "p", "--rank", "counter="}, `--rank "counter=": want`},
		{[]string{"--project", "p", "--prefer", "region in (eu"}, `invalid value "region in (eu" for flag -prefer: not a label selector`},
		{[]string{"--project", "p", "alice"}, `unexpected arguments ["alice"]: players come on standard input`},
		{[]string{"--start-timeout", "soon"}, `invalid value "soon" for flag -start-timeout`},
	} {
		var out bytes.Buffer
		err := run(t.Context(), tc.args, func(string) string { return "" }, strings.NewReader(""), &out, &out)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error(), tc.want, "%v", tc.args)
	}
}
