package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/emulator"
	"github.com/fleetcast/fleetcast/internal/syncbuf"
	"github.com/fleetcast/fleetcast/logging"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// world fills a fresh project: clusters pc (fresh) and old (stale), four
// fleets, one deleted; every fleet ingested 250 ms after it was observed.
func world(tb testing.TB) (project string, store *firestoredb.Store) {
	tb.Helper()
	project = emulator.ProjectID(tb)
	base := time.Now().Truncate(time.Millisecond)
	store = firestoredb.New(emulator.Firestore(tb, project), time.Hour, func() time.Time { return base.Add(250 * time.Millisecond) })
	seq := int64(0)
	apply := func(ev fleet.Event) {
		seq++
		ev.SchemaVersion, ev.Version, ev.Publisher = fleet.SchemaVersion, fleet.Version{Term: 1, Seq: seq}, fleet.Publisher{ID: "pub-" + ev.Cluster, Version: "test"}
		if ev.ObservedAt == 0 {
			ev.ObservedAt = fleet.MicrosOf(base)
		}
		_, err := store.Apply(tb.Context(), ev)
		require.NoError(tb, err)
	}
	up := func(cluster, ns, name, version string, ready, rooms int64) {
		apply(fleet.Event{Kind: fleet.KindUpsert, Cluster: cluster, Namespace: ns, Name: name, Fleet: fleet.State{
			UID: "u", Labels: map[string]string{"app.kubernetes.io/version": version, "platform": "pc"},
			Spec:   fleet.Spec{Replicas: 10},
			Status: fleet.Status{Replicas: 10, ReadyReplicas: ready, AllocatedReplicas: 10 - ready, Counters: map[string]fleet.Aggregate{"rooms": {Count: 10 - rooms, Capacity: 10}}},
		}})
	}
	// Heartbeats first, so that they tombstone nothing written after them.
	// A heartbeat taken at a time is ingested 250 ms later: staleness is
	// judged by the ingest time.
	fs := emulator.Firestore(tb, project)
	beat := func(cluster string, at time.Time, fleets, ready int64) {
		part := fleet.SplitSnapshot(nil, fleet.DefaultSnapshotPartBytes)[0]
		part.ClusterLabels = map[string]string{"region": "europe-west1"}
		part.FleetCount = fleets
		part.Totals = fleet.Status{Replicas: 10 * fleets, ReadyReplicas: ready, AllocatedReplicas: 10*fleets - ready}
		seq++
		beats := firestoredb.New(fs, time.Hour, func() time.Time { return at.Add(250 * time.Millisecond) })
		_, err := beats.Apply(tb.Context(), fleet.Event{
			SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindSnapshot, Cluster: cluster,
			Version: fleet.Version{Term: 1, Seq: seq}, ObservedAt: fleet.MicrosOf(at),
			Publisher: fleet.Publisher{ID: "pub-" + cluster, Version: "test"}, Snapshot: part,
		})
		require.NoError(tb, err)
	}
	beat("pc", base, 2, 10)
	beat("old", base.Add(-time.Hour), 1, 9)
	up("pc", "games", "ranked", "1.42", 8, 3)
	up("pc", "games", "casual", "1.41", 2, 9)
	up("old", "games", "ranked", "1.42", 9, 9)
	up("pc", "games", "gone", "1.42", 1, 1)
	apply(fleet.Event{Kind: fleet.KindDelete, Cluster: "pc", Namespace: "games", Name: "gone"})
	return project, store
}

var timestamps = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)

// golden compares output with testdata/NAME, timestamps blanked.
func golden(tb testing.TB, name, got string) {
	tb.Helper()
	got = timestamps.ReplaceAllStringFunc(got, func(ts string) string {
		if len(ts) == len(time.RFC3339)-5 { // a table's column: keep its width
			return "2006-01-02T15:04:05Z"
		}
		return "<time>"
	})
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(tb, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(tb, err, "run go test -update to create it")
	assert.Equal(tb, string(want), got)
}

func runCLI(tb testing.TB, project string, args ...string) (string, string, error) {
	tb.Helper()
	env := map[string]string{"GOOGLE_CLOUD_PROJECT": project}
	var out, errOut bytes.Buffer
	err := run(tb.Context(), args, func(k string) string { return env[k] }, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestCommandsAgainstFirestoreAndTheAPI(t *testing.T) {
	project, store := world(t)
	srv := httptest.NewServer(query.NewHandler(fleetapi.NewService(store, fleetapi.Options{MaxStaleness: -1, ClusterRefresh: -1}), logging.New(io.Discard, logging.LevelWarning)))
	t.Cleanup(srv.Close)
	tests := []struct {
		golden string
		args   []string
	}{
		{"get-fleets.golden", []string{"get", "fleets"}},
		{"get-fleets-wide-stale.golden", []string{"get", "fleets", "-o", "wide", "--include-stale"}},
		{"get-fleets-selector.golden", []string{"get", "fleets", "-l", "app.kubernetes.io/version=1.42"}},
		{"get-fleets.json.golden", []string{"get", "fleets", "-l", "app.kubernetes.io/version in (1.41)", "-o", "json"}},
		{"get-fleets.yaml.golden", []string{"get", "fleets", "-l", "app.kubernetes.io/version in (1.41)", "-o", "yaml"}},
		{"get-clusters.golden", []string{"get", "clusters"}},
		{"labels.golden", []string{"labels", "app.kubernetes.io/version", "--include-stale"}},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			out, _, err := runCLI(t, project, tt.args...)
			require.NoError(t, err)
			golden(t, tt.golden, out)
			// The same through the query API.
			out, _, err = runCLI(t, project, append(tt.args, "--api", srv.URL)...)
			require.NoError(t, err)
			golden(t, tt.golden, out)
		})
	}
}

func TestErrorsAreOneClearLine(t *testing.T) {
	project, _ := world(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"get", "pods"}, `unknown command "get pods"`},
		{[]string{"get", "fleets", "-l", "version in (1.2"}, "-l: "},
		{[]string{"get", "fleets", "-o", "xml"}, "-o xml: not an output of get fleets"},
		{[]string{"get", "clusters", "-o", "wide"}, "-o wide: not an output of get clusters"},
		{[]string{"labels"}, "labels takes one label key"},
		{[]string{"labels", "bad key"}, `"bad key" is not a label key`},
		{[]string{"get", "fleets", "--cluster", "PC"}, "--cluster: "},
		{[]string{"get", "fleets", "--api", "ftp://x"}, "--api"},
		{[]string{"watch", "--api", "ftp://x"}, "--api"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, _, err := runCLI(t, project, tt.args...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), "\n", "one line")
		})
	}
	_, _, err := runCLI(t, "", "get", "fleets")
	assert.ErrorContains(t, err, "no project")
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"get", "fleets", "--help"}, {"watch", "-h"}} {
		_, stderr, err := runCLI(t, "p", args...)
		require.NoError(t, err, args)
		assert.Contains(t, stderr, "sage", args)
	}
}

// TestWatchPrintsTheTableThenEachChange, from Firestore's listeners and
// from the query API's stream (--api).
func TestWatchPrintsTheTableThenEachChange(t *testing.T) {
	for _, viaAPI := range []bool{false, true} {
		t.Run(map[bool]string{false: "firestore", true: "api"}[viaAPI], func(t *testing.T) {
			project, store := world(t)
			var source []string
			if viaAPI {
				srv := httptest.NewServer(query.NewHandler(fleetapi.NewService(store, fleetapi.Options{WatchPoll: 20 * time.Millisecond}),
					logging.New(io.Discard, logging.LevelWarning)))
				t.Cleanup(srv.Close)
				source = []string{"--api", srv.URL}
			}
			ctx, cancel := context.WithCancel(t.Context())
			out := &syncbuf.Buffer{}
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, append([]string{"watch", "-l", "app.kubernetes.io/version=1.41"}, source...), func(k string) string {
					return map[string]string{"GOOGLE_CLOUD_PROJECT": project}[k]
				}, out, io.Discard)
			}()
			waitFor := func(what, s string) {
				t.Helper()
				deadline := time.Now().Add(30 * time.Second)
				for !strings.Contains(out.String(), s) {
					require.True(t, time.Now().Before(deadline), "%s: output so far:\n%s", what, out.String())
					<-time.After(10 * time.Millisecond)
				}
			}
			waitFor("the initial table", "casual")
			_, err := store.Apply(t.Context(), fleet.Event{
				SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindDelete, Cluster: "pc", Namespace: "games", Name: "casual",
				Version: fleet.Version{Term: 2, Seq: 1}, ObservedAt: fleet.MicrosOf(time.Now()), Publisher: fleet.Publisher{ID: "p"},
			})
			require.NoError(t, err)
			waitFor("the removal", "REMOVED")
			cancel()
			require.NoError(t, <-done)
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			require.Len(t, lines, 3, out.String())
			assert.True(t, strings.HasPrefix(lines[0], "CHANGE "))
			assert.Regexp(t, `^-\s+pc\s+games\s+casual\s+2\s+8\s+10/10\s+250ms\s+false$`, lines[1])
			assert.Regexp(t, `^REMOVED\s+pc\s+games\s+casual\s`, lines[2])
		})
	}
}
