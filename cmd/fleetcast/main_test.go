package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/syncbuf"
	"github.com/fleetcast/fleetcast/logging"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// world fills a fresh project: clusters pc (fresh) and old (stale), four
// fleets, one deleted; every fleet ingested 250 ms after it was observed.
// It fixes the CLI's clock 42 s after pc's observations, so that tables'
// ages are known: pc's heartbeat and fleets are 42s old, old's 60m.
func world(tb testing.TB) (project string, store *firestoredb.Store) {
	tb.Helper()
	project = emulator.ProjectID(tb)
	base := time.Now().Truncate(time.Millisecond)
	clock = func() time.Time { return base.Add(42 * time.Second) }
	tb.Cleanup(func() { clock = time.Now })
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
	// pc's ranked finished its rollout, casual is rolling; old's ranked
	// has a publisher older than rollouts.
	rollouts := map[string]fleet.Rollout{
		"pc/ranked": fleet.RolloutOf(10, []fleet.GameServerSet{{Name: "ranked-b", Current: true, Replicas: 10, ReadyReplicas: 8, AllocatedReplicas: 2}, {Name: "ranked-a"}}),
		"pc/casual": fleet.RolloutOf(10, []fleet.GameServerSet{{Name: "casual-b", Current: true, Replicas: 4, ReadyReplicas: 2, AllocatedReplicas: 2}, {Name: "casual-a", Replicas: 6, AllocatedReplicas: 6}}),
	}
	up := func(cluster, ns, name, version string, ready, rooms int64) {
		apply(fleet.Event{Kind: fleet.KindUpsert, Cluster: cluster, Namespace: ns, Name: name, Fleet: fleet.State{
			UID: "u", Labels: map[string]string{"app.kubernetes.io/version": version, "platform": "pc"},
			Spec:    fleet.Spec{Replicas: 10},
			Status:  fleet.Status{Replicas: 10, ReadyReplicas: ready, AllocatedReplicas: 10 - ready, Counters: map[string]fleet.Aggregate{"rooms": {Count: 10 - rooms, Capacity: 10}}},
			Rollout: rollouts[cluster+"/"+name],
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
		part.Totals = fleet.Status{Replicas: 10 * fleets, ReadyReplicas: ready, AllocatedReplicas: 10*fleets - ready,
			Counters: map[string]fleet.Aggregate{"rooms": {Count: 10, Capacity: 10 * fleets}}}
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
		{"get-clusters-wide.golden", []string{"get", "clusters", "-o", "wide"}},
		{"labels.golden", []string{"labels", "app.kubernetes.io/version", "--include-stale"}},
		{"get-fleets.name.golden", []string{"get", "fleets", "-o", "name", "--include-stale"}},
		{"get-fleets.jsonpath.golden", []string{"get", "fleets", "-o", `jsonpath={range .items[*]}{.name}{"\t"}{.readyReplicas}{"\n"}{end}`}},
		{"get-fleets-no-headers-sorted.golden", []string{"get", "fleets", "--no-headers", "--sort-by", "ready", "--include-stale"}},
		{"get-fleets-thresholds.golden", []string{"get", "fleets", "--min-ready", "3", "--counter", "rooms", "--min-available", "2"}},
		{"get-fleets-rolling.golden", []string{"get", "fleets", "--rollout-complete=false", "-o", "wide", "--include-stale"}},
		{"get-fleet.yaml.golden", []string{"get", "fleet", "pc/games/ranked", "-o", "yaml"}},
		{"get-fleet.golden", []string{"get", "fleet", "pc/games/casual"}},
		{"get-cluster.json.golden", []string{"get", "cluster", "pc", "-o", "json"}},
		{"get-clusters.name.golden", []string{"get", "clusters", "-o", "name"}},
		{"get-clusters.jsonpath.golden", []string{"get", "clusters", "-o", "jsonpath={.items[*].cluster}"}},
		{"get-fleets.custom-columns.golden", []string{"get", "fleets", "--include-stale", "-o", "custom-columns=FLEET:.name,CLUSTER:.cluster,ROOMS:.counters.rooms.available,NONE:.nothing"}},
		{"get-fleets.go-template.golden", []string{"get", "fleets", "-o", `go-template={{range .items}}{{.cluster}}/{{.name}} {{.readyReplicas}}{{"\n"}}{{end}}`}},
		{"get-cluster.custom-columns.golden", []string{"get", "cluster", "pc", "-o", "custom-columns=NAME:.cluster,REGION:.labels.region", "--no-headers"}},
		{"labels.name.golden", []string{"labels", "app.kubernetes.io/version", "-o", "name"}},
		{"labels.yaml.golden", []string{"labels", "app.kubernetes.io/version", "-o", "yaml"}},
		{"place.golden", []string{"place", "-l", "app.kubernetes.io/version=1.42", "--counter", "rooms=3"}},
		{"place.name.golden", []string{"place", "--policy", "region=europe-west1:2", "--min-ready", "5", "-o", "name"}},
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

// TestErrorsAreOneClearLine: every mistake is one line saying what failed
// and what to do, and an exit code a script can tell apart.
func TestErrorsAreOneClearLine(t *testing.T) {
	project, _ := world(t)
	tests := []struct {
		args []string
		want string
		code int
	}{
		{[]string{"get", "pods"}, `get pods: unknown resource; want fleets, fleet CLUSTER/NAMESPACE/NAME or clusters`, exitUsage},
		{[]string{"get"}, `get what?`, exitUsage},
		{[]string{"frobnicate"}, `unknown command "frobnicate" for fleetcast`, exitUsage},
		{[]string{"gte", "fleets"}, `unknown command "gte" for fleetcast; did you mean get?`, exitUsage},
		{[]string{"get", "flets"}, "get flets: unknown resource; want fleets, fleet CLUSTER/NAMESPACE/NAME or clusters; did you mean fleets?", exitUsage},
		{[]string{"get", "fleets", "a", "b"}, "fleetcast get fleets: accepts at most 1 arg(s), received 2", exitUsage},
		{[]string{"version", "now"}, `unexpected arguments ["now"]`, exitUsage},
		{[]string{"get", "fleets", "--colour"}, `unknown flag: --colour (see fleetcast get fleets --help)`, exitUsage},
		{[]string{"get", "fleets", "-l", "version in (1.2"}, "-l: ", exitUsage},
		{[]string{"get", "fleets", "-o", "xml"}, "-o xml: not an output of fleetcast get fleets (want table, wide, json, yaml, name, jsonpath=TEMPLATE, go-template=TEMPLATE, custom-columns=SPEC)", exitUsage},
		{[]string{"get", "fleets", "-o", "jsonpath={.items[}"}, "-o jsonpath: ", exitUsage},
		{[]string{"labels", "platform", "-o", "wide"}, "-o wide: not an output of fleetcast labels", exitUsage},
		{[]string{"get", "fleets", "-o", "custom-columns=NAME"}, `-o custom-columns: "NAME": want HEADER:JSONPATH`, exitUsage},
		{[]string{"get", "fleets", "-o", "go-template={{.nope"}, "-o go-template: ", exitUsage},
		{[]string{"get", "fleets", "--sort-by", "available"}, "--sort-by: available needs a counter or list parameter", exitUsage},
		{[]string{"get", "fleets", "--min-available", "2"}, "--min-available: needs counter", exitUsage},
		{[]string{"get", "fleets", "-w", "--min-ready", "1"}, "-w: --min-ready, --counter, --list and --sort-by do not apply to a watch", exitUsage},
		{[]string{"labels"}, "labels takes one label key", exitUsage},
		{[]string{"labels", "bad key"}, `"bad key" is not a label key`, exitUsage},
		{[]string{"get", "fleets", "--cluster", "PC"}, "--cluster: ", exitUsage},
		{[]string{"get", "fleet", "pc/ranked"}, `fleet "pc/ranked": want CLUSTER/NAMESPACE/NAME`, exitUsage},
		{[]string{"get", "fleet", "pc/games/nope"}, "fleet pc/games/nope: not found", exitNotFound},
		{[]string{"get", "cluster", "nope"}, "cluster nope: not found", exitNotFound},
		{[]string{"get", "fleets", "--api", "ftp://x"}, "--api", exitUsage},
		{[]string{"watch", "--api", "ftp://x"}, "--api", exitUsage},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, _, err := runCLI(t, project, tt.args...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), "\n", "one line")
			assert.Equal(t, tt.code, exitCode(err), "%v", err)
		})
	}
	_, _, err := runCLI(t, "", "get", "fleets")
	assert.ErrorContains(t, err, "no project")
	assert.Equal(t, exitUsage, exitCode(err))
}

// TestUnreachableFirestoreFailsWithinTheRequestTimeout: every command, the
// watch included, gives up after --request-timeout with exit code 4 and a
// line saying what to check, rather than hanging.
func TestUnreachableFirestoreFailsWithinTheRequestTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	t.Setenv(emulator.FirestoreHostEnv, addr)
	for _, args := range [][]string{{"get", "fleets"}, {"get", "clusters"}, {"labels", "platform"}, {"watch"}, {"get", "fleets", "-w"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			start := time.Now()
			var out, errOut bytes.Buffer
			o, err := runWith(t.Context(), append(args, "--request-timeout", "1s"), func(k string) string {
				return map[string]string{"GOOGLE_CLOUD_PROJECT": "p"}[k]
			}, &out, &errOut)
			require.Error(t, err)
			assert.Less(t, time.Since(start), 10*time.Second)
			assert.Equal(t, exitUnavailable, exitCode(err), "%v", err)
			msg := message(err, o)
			assert.Contains(t, msg, "no answer from Firestore (project p) within --request-timeout 1s: check it is reachable, then retry or raise --request-timeout")
			assert.NotContains(t, msg, "\n")
		})
	}
}

// TestAPlainHTTPAPIIsWarnedOf: --api over plain http to another machine
// sends no ID token, and says so; a loopback address needs none.
func TestAPlainHTTPAPIIsWarnedOf(t *testing.T) {
	_, stderr, err := runCLI(t, "p", "get", "clusters", "--api", "http://fleetcast.invalid", "--request-timeout", "2s")
	require.Error(t, err, "nothing answers there")
	assert.Contains(t, stderr, "--api http://fleetcast.invalid is plain http: no ID token is sent over it")
	_, stderr, _ = runCLI(t, "p", "get", "clusters", "--api", "http://127.0.0.1:1", "--request-timeout", "2s")
	assert.NotContains(t, stderr, "plain http")
}

// TestHelp: --help works at every level, exits 0, and lists the
// command's own flags.
func TestHelp(t *testing.T) {
	root := newRoot(t.Context(), &global{}, io.Discard, io.Discard)
	root.InitDefaultHelpCmd() // added when it runs
	root.InitDefaultCompletionCmd()
	var walk func(*cobra.Command)
	commands := 0
	walk = func(c *cobra.Command) {
		commands++
		path := strings.Fields(c.CommandPath())[1:]
		for _, help := range []string{"--help", "-h"} {
			stdout, _, err := runCLI(t, "p", append(slices.Clone(path), help)...)
			require.NoError(t, err, "%v %s", path, help)
			assert.Contains(t, stdout, "Usage:", path)
			c.LocalFlags().VisitAll(func(f *pflag.Flag) {
				assert.Contains(t, stdout, "--"+f.Name, "%v lists its flag", path)
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	assert.GreaterOrEqual(t, commands, 10, "fleetcast, get, get fleets, get clusters, labels, watch, version, completion and its shells, help")
	stdout, _, err := runCLI(t, "p", "help", "get", "fleets")
	require.NoError(t, err)
	assert.Contains(t, stdout, "--selector")
}

// TestTheDocsShowTheHelp: docs/cli.md shows fleetcast --help as it is.
func TestTheDocsShowTheHelp(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	require.NoError(t, err)
	var out bytes.Buffer
	root := newRoot(t.Context(), &global{}, &out, &out)
	root.SetArgs([]string{"--help"})
	require.NoError(t, root.Execute())
	block := "```\n$ fleetcast --help\n" + out.String() + "```\n"
	assert.True(t, strings.Contains(string(readme), block), "docs/cli.md must show fleetcast --help exactly; paste:\n%s", block)
}

// TestVersionAndCompletion: version names the build; completion writes
// each shell's script.
func TestVersionAndCompletion(t *testing.T) {
	out, _, err := runCLI(t, "p", "version")
	require.NoError(t, err)
	assert.Regexp(t, `^fleetcast \S+ \(commit \S+, go1\.\d+[^,]*, [a-z0-9]+/[a-z0-9]+\)\n$`, out)
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, _, err := runCLI(t, "p", "completion", shell)
		require.NoError(t, err, shell)
		assert.Contains(t, out, "fleetcast", shell)
		assert.Greater(t, len(out), 1000, shell)
	}
}

// TestVersionInEveryOutput: version -o json|yaml prints kubectl's
// clientVersion, and with --api the server's (GET /v1/version) as
// serverVersion; a line per program without -o. An API that does not say
// its version fails the command (after the client's), as kubectl version
// does.
func TestVersionInEveryOutput(t *testing.T) {
	_, store := world(t)
	api := httptest.NewServer(query.NewHandler(fleetapi.NewService(store, fleetapi.Options{}), logging.New(io.Discard, logging.LevelWarning)))
	t.Cleanup(api.Close)

	out, _, err := runCLI(t, "p", "version", "-o", "json")
	require.NoError(t, err)
	var v versions
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	assert.Equal(t, "fleetcast", v.Client.Program)
	assert.NotEmpty(t, v.Client.Version)
	assert.Nil(t, v.Server, "no --api, no server")
	assert.NotContains(t, out, "serverVersion")

	out, _, err = runCLI(t, "p", "version", "-o", "yaml", "--api", api.URL)
	require.NoError(t, err)
	v = versions{}
	require.NoError(t, yaml.Unmarshal([]byte(out), &v))
	assert.Equal(t, "fleetcast", v.Client.Program)
	require.NotNil(t, v.Server)
	assert.Equal(t, query.Program, v.Server.Program)
	assert.Equal(t, v.Client.Commit, v.Server.Commit, "built from the same tree")

	out, _, err = runCLI(t, "p", "version", "--api", api.URL)
	require.NoError(t, err)
	assert.Regexp(t, `^fleetcast \S+ \(commit \S+, go1\.\d+[^,]*, [a-z0-9]+/[a-z0-9]+\)\nserver: fleetcast-query \S+ \(commit \S+, go1\.\d+[^,]*, [a-z0-9]+/[a-z0-9]+\)\n$`, out)

	_, _, err = runCLI(t, "p", "version", "-o", "xml")
	require.Error(t, err)
	assert.Equal(t, exitUsage, exitCode(err))

	old := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(old.Close)
	out, _, err = runCLI(t, "p", "version", "--api", old.URL)
	require.Error(t, err)
	assert.Regexp(t, `^fleetcast \S+`, out, "the client's version all the same")
	assert.Equal(t, exitNotFound, exitCode(err))
	assert.Contains(t, err.Error(), "older than this client")
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
			waitFor("the removal", "DELETED")
			cancel()
			require.NoError(t, <-done)
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			require.Len(t, lines, 3, out.String())
			assert.True(t, strings.HasPrefix(lines[0], "CHANGE "))
			assert.Regexp(t, `^-\s+pc\s+games\s+casual\s+2\s+8\s+10/10\s+250ms\s+false\s+42s$`, lines[1])
			assert.Regexp(t, `^DELETED\s+pc\s+games\s+casual\s`, lines[2])
			// Every column of the change starts where the header's does.
			for _, at := range regexp.MustCompile(`\S+`).FindAllStringIndex(lines[0], -1) {
				require.Greater(t, len(lines[2]), at[0], out.String())
				assert.NotEqual(t, byte(' '), lines[2][at[0]], "the change's columns line up with the header:\n%s", out.String())
				if at[0] > 0 {
					assert.Equal(t, byte(' '), lines[2][at[0]-1], "the change's columns line up with the header:\n%s", out.String())
				}
			}
		})
	}
}

// TestARefusedCallerExits5: the query API's IAM refusing the caller (403,
// no error document: Cloud Run's own page) is a permission failure on
// every command and both protocols: exit code 5 and what to check.
func TestARefusedCallerExits5(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>Error: Forbidden</html>", http.StatusForbidden)
	}))
	t.Cleanup(srv.Close)
	for _, args := range [][]string{{"get", "fleets"}, {"get", "clusters"}, {"labels", "platform"}, {"watch"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			o, err := runWith(t.Context(), append(args, "--api", srv.URL, "--request-timeout", "5s"), func(string) string { return "" }, &out, &errOut)
			require.Error(t, err)
			assert.Equal(t, exitPermission, exitCode(err), "%v", err)
			assert.Contains(t, message(err, o), "check the credentials")
		})
	}
}

// TestAWatchInJSONIsKubectlsEvents: -o json prints kubectl's watch events,
// {"type":"ADDED","object":FLEET}, the initial fleets as ADDED.
func TestAWatchInJSONIsKubectlsEvents(t *testing.T) {
	project, store := world(t)
	ctx, cancel := context.WithCancel(t.Context())
	out := &syncbuf.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"watch", "-l", "app.kubernetes.io/version=1.41", "-o", "json"}, func(k string) string {
			return map[string]string{"GOOGLE_CLOUD_PROJECT": project}[k]
		}, out, io.Discard)
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "casual") }, 30*time.Second, 10*time.Millisecond)
	_, err := store.Apply(t.Context(), fleet.Event{
		SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindDelete, Cluster: "pc", Namespace: "games", Name: "casual",
		Version: fleet.Version{Term: 2, Seq: 1}, ObservedAt: fleet.MicrosOf(time.Now()), Publisher: fleet.Publisher{ID: "p"},
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "DELETED") }, 30*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	var events []struct {
		Type   string         `json:"type"`
		Object fleetapi.Fleet `json:"object"`
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e struct {
			Type   string         `json:"type"`
			Object fleetapi.Fleet `json:"object"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &e), line)
		events = append(events, e)
	}
	require.Len(t, events, 2, out.String())
	assert.Equal(t, "ADDED", events[0].Type)
	assert.Equal(t, "casual", events[0].Object.Name)
	assert.Equal(t, "DELETED", events[1].Type)
	assert.Equal(t, "casual", events[1].Object.Name)
}

// TestTheProjectComesFromTheFlagTheEnvironmentThenGcloud: --project, then
// GOOGLE_CLOUD_PROJECT, then gcloud's configured project
// (CLOUDSDK_CORE_PROJECT, or the active configuration's core/project).
func TestTheProjectComesFromTheFlagTheEnvironmentThenGcloud(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "configurations"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "active_config"), []byte("studio\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "configurations", "config_studio"),
		[]byte("[compute]\nregion = europe-west1\n\n[core]\naccount = ada@example.com\nproject = studio-fleets\n"), 0o644))
	env := map[string]string{"CLOUDSDK_CONFIG": dir}
	getenv := func(k string) string { return env[k] }
	assert.Equal(t, "studio-fleets", gcloudProject(getenv), "the active configuration's")
	env["CLOUDSDK_ACTIVE_CONFIG_NAME"] = "other"
	assert.Empty(t, gcloudProject(getenv), "a configuration that does not exist has none")
	env["CLOUDSDK_CORE_PROJECT"] = "from-the-variable"
	assert.Equal(t, "from-the-variable", gcloudProject(getenv))
	delete(env, "CLOUDSDK_CORE_PROJECT")
	delete(env, "CLOUDSDK_ACTIVE_CONFIG_NAME")

	// The order: a command against an unreachable Firestore names the
	// project it tried.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	t.Setenv(emulator.FirestoreHostEnv, addr)
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--project", "flagged"}, map[string]string{"GOOGLE_CLOUD_PROJECT": "env", "CLOUDSDK_CONFIG": dir}, "flagged"},
		{nil, map[string]string{"GOOGLE_CLOUD_PROJECT": "env", "CLOUDSDK_CONFIG": dir}, "env"},
		{nil, map[string]string{"CLOUDSDK_CONFIG": dir}, "studio-fleets"},
	} {
		var out, errOut bytes.Buffer
		g, err := runWith(t.Context(), append([]string{"get", "clusters", "--request-timeout", "200ms"}, tt.args...),
			func(k string) string { return tt.env[k] }, &out, &errOut)
		require.Error(t, err)
		assert.Contains(t, message(err, g), "Firestore (project "+tt.want+")")
	}
}

// TestTheAPIsRefusalsNameTheFlag: what the server refuses (a counter no
// cluster reports) is told in the same words, naming the same flag, with
// the same exit code, from Firestore and through the API's one protocol.
func TestTheAPIsRefusalsNameTheFlag(t *testing.T) {
	project, store := world(t)
	srv := httptest.NewServer(query.NewHandler(fleetapi.NewService(store, fleetapi.Options{MaxStaleness: -1, ClusterRefresh: -1}), logging.New(io.Discard, logging.LevelWarning)))
	t.Cleanup(srv.Close)
	for _, args := range [][]string{
		{"get", "fleets", "--counter", "seats", "--min-available", "1"},
		{"get", "fleet", "pc/games/nope"},
		{"get", "cluster", "nope"},
	} {
		_, _, direct := runCLI(t, project, args...)
		_, _, viaAPI := runCLI(t, project, append(args, "--api", srv.URL)...)
		require.Error(t, direct)
		require.Error(t, viaAPI)
		assert.Equal(t, direct.Error(), viaAPI.Error(), "%v", args)
		assert.Equal(t, exitCode(direct), exitCode(viaAPI), "%v", args)
	}
}

// TestPlaceSaysWhyNoFleetCanTakeTheMatch: with no candidate, place exits
// 3 with the reasons on one line, from either source; a bad flag is named.
func TestPlaceSaysWhyNoFleetCanTakeTheMatch(t *testing.T) {
	project, store := world(t)
	srv := httptest.NewServer(query.NewHandler(fleetapi.NewService(store, fleetapi.Options{MaxStaleness: -1, ClusterRefresh: -1}), logging.New(io.Discard, logging.LevelWarning)))
	t.Cleanup(srv.Close)
	for _, api := range [][]string{nil, {"--api", srv.URL}} {
		out, _, err := runCLI(t, project, append([]string{"place", "--counter", "rooms=10", "--policy", "region=mars:0", "--policy", ":1"}, api...)...)
		require.Error(t, err)
		assert.Empty(t, out)
		assert.Equal(t, exitNotFound, exitCode(err))
		assert.Equal(t, "no fleet can take the match: 1 fleet of stale clusters (old): no heartbeat for 1m30s; "+
			"2 fleets have less than the match needs (10 available in counter rooms)", err.Error())

		for args, want := range map[string]string{
			"--policy region=eu:x": `--policy: "region=eu:x": priority "x": want an integer from 0 (first) to 2147483647`,
			"--counter rooms=0":    "--counter rooms=0: want NAME or NAME=AMOUNT, AMOUNT an integer of 1 or more",
			"--count 101":          `--count: "101": want an integer from 1 to 100`,
			"--counter seats":      `--counter: no cluster reports a counter "seats"`,
			"--game-servers -1":    `--game-servers: "-1": want a non-negative integer`,
		} {
			_, _, err := runCLI(t, project, append(append([]string{"place"}, strings.Fields(args)...), api...)...)
			require.Error(t, err, args)
			assert.Equal(t, exitUsage, exitCode(err), args)
			assert.Equal(t, want, err.Error(), args)
		}
	}
}
