package terraform_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetfeed"
)

// The sizing rule for a publisher's start-up republish (terraform/README.md,
// "Sizing the ingest function"): every fleet of a cluster is sent at once,
// and a push Cloud Run refuses with 429 still counts as a delivery attempt.
const (
	// republishFleets is the burst to absorb: one cluster of 10 000 fleets.
	republishFleets = 10_000
	// upsertsPerRequestSecond is what one in-flight push request applies
	// per second against Firestore in the cloud: a conditional upsert is a
	// few RPCs of a few milliseconds each in the region; 50 ms per event
	// is taken as the worst case (the emulator does one in ~1.7 ms).
	upsertsPerRequestSecond = 20
	// burstMargin covers Pub/Sub's push slow start and Firestore's ramp-up
	// of a new collection (500 writes/s, +50 % every 5 minutes).
	burstMargin = 3
	// coldStart covers the instances starting.
	coldStart = 60 * time.Second
	// maxBackoff is the retry policy's longest wait.
	maxBackoff = 600 * time.Second
)

// plannedResource is one resource of `terraform show -json`'s
// planned_values.
type plannedResource struct {
	Address string         `json:"address"`
	Type    string         `json:"type"`
	Name    string         `json:"name"`
	Values  map[string]any `json:"values"`
}

type plannedModule struct {
	Resources    []plannedResource `json:"resources"`
	ChildModules []plannedModule   `json:"child_modules"`
}

// planEnvironment plans examples/env as a first apply on a fresh
// project (scripts/terraform.sh plan) with the clusters variable clusters
// (HCL, "{}" for none) and returns its planned resources by address.
func planEnvironment(tb testing.TB, env, clusters string) map[string]plannedResource {
	tb.Helper()
	if os.Getenv("FLEETCAST_TF_PROVIDER_DIR") == "" {
		if os.Getenv("REQUIRE_TERRAFORM") == "1" {
			tb.Fatal("FLEETCAST_TF_PROVIDER_DIR is not set but REQUIRE_TERRAFORM=1: make test builds the provider")
		}
		tb.Skip("needs the Google provider built for offline Terraform; run make test")
	}
	out := tb.TempDir()
	cmd := exec.Command(mustAbs(tb, "../scripts/terraform.sh"), "plan", env, out, clusters)
	b, err := cmd.CombinedOutput()
	require.NoError(tb, err, "plan of examples/%s with clusters %s:\n%s", env, clusters, b)
	raw := mustRead(tb, filepath.Join(out, "plan.json"))
	var plan struct {
		PlannedValues struct {
			RootModule plannedModule `json:"root_module"`
		} `json:"planned_values"`
	}
	require.NoError(tb, json.Unmarshal(raw, &plan))
	all := map[string]plannedResource{}
	var collect func(m plannedModule)
	collect = func(m plannedModule) {
		for _, r := range m.Resources {
			all[r.Address] = r
		}
		for _, c := range m.ChildModules {
			collect(c)
		}
	}
	collect(plan.PlannedValues.RootModule)
	require.NotEmpty(tb, all)
	return all
}

// TestEnvironmentsPlanOnAFreshProjectAndKeepThePlatformsRules plans dev and
// prod without any cluster — a project with no GKE cluster — and checks the
// planned values against Cloud Run's and IAM's rules.
func TestEnvironmentsPlanOnAFreshProjectAndKeepThePlatformsRules(t *testing.T) {
	for _, env := range []string{"dev", "prod"} {
		t.Run(env, func(t *testing.T) {
			res := planEnvironment(t, env, "{}")
			byType := func(typ string) []plannedResource {
				var out []plannedResource
				for _, r := range res {
					if r.Type == typ {
						out = append(out, r)
					}
				}
				return out
			}

			// No cluster: no publisher account and no Workload Identity
			// binding into a pool that does not exist.
			assert.Zero(t, countWI(byType("google_service_account_iam_member")), "no Workload Identity binding without clusters")

			// Every service account ID is one Google accepts.
			for _, sa := range byType("google_service_account") {
				id := sa.Values["account_id"].(string)
				assert.Regexp(t, serviceAccountID, id, "%s", sa.Address)
				assert.NotContains(t, id, "-pub-", "no publisher account without clusters")
			}

			// Cloud Run accepts each function's and service's size.
			functions := workloads(t, res)
			require.Len(t, functions, 2)
			for _, fn := range functions {
				sc := fn.Config
				cpu, _ := sc["available_cpu"].(string)
				concurrency := int(sc["max_instance_request_concurrency"].(float64))
				assert.NoError(t, cloudRunSize(cpu, sc["available_memory"].(string), concurrency), "%s", fn.Address)
				_, eventDriven := fn.Values["event_trigger"].([]any)
				eventDriven = eventDriven && len(fn.Values["event_trigger"].([]any)) > 0
				assert.NoError(t, functionTimeout(int(sc["timeout_seconds"].(float64)), eventDriven), "%s", fn.Address)
				if fn.Entry == "QueryFleets" {
					assert.NoError(t, queryGC(t, sc), "%s", fn.Address)
				}
			}
			if env == "prod" {
				assert.Empty(t, byType("google_cloudfunctions2_function"), "prod runs both sides as services, billed by instance")
				for _, svc := range byType("google_cloud_run_v2_service") {
					assert.Equal(t, false, first(t, first(t, first(t, svc.Values["template"])["containers"])["resources"])["cpu_idle"], "%s is billed by instance", svc.Address)
				}
			}

			// No cluster, no cluster topic: only the dead letters' and
			// the change feed's, which both functions name, and whose
			// subscriptions the query identity may hold only by the
			// name its instances give them.
			topics := byType("google_pubsub_topic")
			assert.Len(t, topics, 2)
			assert.Len(t, byType("google_pubsub_subscription"), 1)
			var feed string
			for _, tp := range topics {
				if strings.HasSuffix(tp.Address, ".changes[0]") {
					feed = tp.Values["name"].(string)
				}
			}
			require.NotEmpty(t, feed, "the change feed's topic")
			for _, fn := range functions {
				env := fn.Config["environment_variables"].(map[string]any)
				assert.Equal(t, feed, env["CHANGE_TOPIC"], "%s follows or announces on the feed", fn.Address)
			}
			grants := byType("google_project_iam_member")
			var conditioned bool
			for _, g := range grants {
				if strings.HasSuffix(g.Address, ".query_view_feed[0]") {
					expr := first(t, g.Values["condition"])["expression"].(string)
					assert.Contains(t, expr, `resource.name.startsWith("projects/`+g.Values["project"].(string)+`/subscriptions/`+fleetfeed.SubscriptionPrefix(feed)+`")`)
					conditioned = true
				}
			}
			assert.True(t, conditioned, "the query identity's grant on its feed subscriptions")
		})
	}
}

// TestEnvironmentsSizeTheirSubscriptionsByThePlatformsRules plans dev and
// prod with a cluster and checks its topic and subscription against
// Pub/Sub's retention and the republish sizing rule.
func TestEnvironmentsSizeTheirSubscriptionsByThePlatformsRules(t *testing.T) {
	for _, env := range []string{"dev", "prod"} {
		t.Run(env, func(t *testing.T) {
			res := planEnvironment(t, env, `{"pc-eu" = {gke_project = "studio-game-eu", node_service_account = "gke-nodes@studio-game-eu.iam.gserviceaccount.com"}}`)
			// No message outlives a tombstone, and every delivery attempt
			// comes before the subscription drops the message.
			var sc map[string]any
			for _, w := range workloads(t, res) {
				if w.Entry == "IngestFleetEvents" {
					sc = w.Config
				}
			}
			require.NotNil(t, sc, "the ingest function or service")
			tombstones := mustDuration(t, sc["environment_variables"].(map[string]any)["TOMBSTONE_RETENTION"].(string))
			sub := res[`module.fleetcast.google_pubsub_subscription.ingest["pc-eu"]`]
			require.NotNil(t, sub.Values, "the cluster's push subscription")
			assert.Equal(t, "fleet-events-pc-eu", res[`module.fleetcast.google_pubsub_topic.events["pc-eu"]`].Values["name"])
			deadLetters := res["module.fleetcast.google_pubsub_subscription.dead_letter"]
			topic := res[`module.fleetcast.google_pubsub_topic.events["pc-eu"]`]
			subRetention := mustDuration(t, sub.Values["message_retention_duration"].(string))
			dlRetention := mustDuration(t, deadLetters.Values["message_retention_duration"].(string))
			assert.LessOrEqual(t, subRetention+dlRetention, tombstones, "the subscription's and the dead letters' retention together within the tombstones' %s", tombstones)
			assert.LessOrEqual(t, mustDuration(t, topic.Values["message_retention_duration"].(string)), tombstones, "a seek on the topic replays nothing older than a tombstone")
			attempts := int(first(t, sub.Values["dead_letter_policy"])["max_delivery_attempts"].(float64))
			assert.LessOrEqual(t, time.Duration(attempts)*maxBackoff, subRetention, "all %d attempts before the subscription drops the message", attempts)

			// A start-up republish is never dead-lettered.
			retry := first(t, sub.Values["retry_policy"])
			share, err := strconv.Atoi(sc["environment_variables"].(map[string]any)["MAX_CLUSTER_IN_FLIGHT"].(string))
			require.NoError(t, err, "MAX_CLUSTER_IN_FLIGHT")
			concurrency := int(sc["max_instance_request_concurrency"].(float64))
			assert.Less(t, share, concurrency, "a cluster's share leaves room for the others")
			assert.NoError(t, absorbsRepublish(
				int(sc["max_instance_count"].(float64)),
				min(concurrency, share), // one cluster's republish gets its share
				attempts,
				mustDuration(t, retry["minimum_backoff"].(string)),
				mustDuration(t, retry["maximum_backoff"].(string)),
			))
		})
	}
}

// workload is a planned function or Cloud Run service of the module: its
// settings as a function's service_config names them.
type workload struct {
	plannedResource
	Entry  string
	Config map[string]any
}

// workloads lists the planned functions and services: a service's
// template read as the service_config its function would have, its
// entry point from its image (fleetcast-ingest, fleetcast-query).
func workloads(tb testing.TB, res map[string]plannedResource) []workload {
	tb.Helper()
	var out []workload
	for _, r := range res {
		switch r.Type {
		case "google_cloudfunctions2_function":
			out = append(out, workload{r, first(tb, r.Values["build_config"])["entry_point"].(string), first(tb, r.Values["service_config"])})
		case "google_cloud_run_v2_service":
			tmpl := first(tb, r.Values["template"])
			c := first(tb, tmpl["containers"].([]any)[:1])
			limits := first(tb, c["resources"])["limits"].(map[string]any)
			env := map[string]any{}
			for _, e := range c["env"].([]any) {
				e := e.(map[string]any)
				env[e["name"].(string)] = e["value"]
			}
			timeout := mustDuration(tb, tmpl["timeout"].(string))
			entry := map[string]string{"ingest": "IngestFleetEvents", "query": "QueryFleets"}[c["name"].(string)]
			require.NotEmpty(tb, entry, "%s: a container named ingest or query", r.Address)
			out = append(out, workload{r, entry, map[string]any{
				"available_cpu": limits["cpu"], "available_memory": limits["memory"],
				"max_instance_request_concurrency": tmpl["max_instance_request_concurrency"],
				"max_instance_count":               first(tb, tmpl["scaling"])["max_instance_count"],
				"timeout_seconds":                  timeout.Seconds(),
				"environment_variables":            env,
			}})
		}
	}
	return out
}

// countWI counts the Workload Identity bindings among IAM members.
func countWI(members []plannedResource) int {
	n := 0
	for _, m := range members {
		if m.Values["role"] == "roles/iam.workloadIdentityUser" {
			n++
		}
	}
	return n
}

// serviceAccountID is Google's rule for a service account ID.
var serviceAccountID = regexp.MustCompile(`^[a-z][-a-z0-9]{4,28}[a-z0-9]$`)

func first(tb testing.TB, v any) map[string]any {
	tb.Helper()
	list, ok := v.([]any)
	require.True(tb, ok && len(list) == 1, "one block: %v", v)
	return list[0].(map[string]any)
}

func mustDuration(tb testing.TB, s string) time.Duration {
	tb.Helper()
	d, err := time.ParseDuration(s)
	require.NoError(tb, err)
	return d
}

// absorbsRepublish is the sizing rule: the ingest function drains
// republishFleets at maxInstances × concurrency × upsertsPerRequestSecond,
// and a message refused at every attempt still lives (attempts − 1) ×
// the minimum backoff — Pub/Sub waits at least that between attempts —
// which must cover burstMargin drains plus the cold start.
func absorbsRepublish(maxInstances, concurrency, attempts int, minBackoff, maxBackoffSet time.Duration) error {
	if maxBackoffSet != maxBackoff {
		return fmt.Errorf("maximum backoff %s: the rule assumes %s", maxBackoffSet, maxBackoff)
	}
	drain := time.Duration(float64(republishFleets) / float64(maxInstances*concurrency*upsertsPerRequestSecond) * float64(time.Second))
	need := burstMargin*drain + coldStart
	have := time.Duration(attempts-1) * minBackoff
	if have < need {
		return fmt.Errorf("a republish of %d fleets drains in %s at %d instances × %d requests × %d/s; a refused message is retried for at least %d × %s = %s, less than %d × %s + %s = %s: it may be dead-lettered",
			republishFleets, drain.Round(time.Second), maxInstances, concurrency, upsertsPerRequestSecond, attempts-1, minBackoff, have, burstMargin, drain.Round(time.Second), coldStart, need.Round(time.Second))
	}
	return nil
}

func TestTheRepublishRuleRefusesTheSizesThatDeadLettered(t *testing.T) {
	// dev before: 3 instances × concurrency 1, 10 attempts from 1 s.
	assert.Error(t, absorbsRepublish(3, 1, 10, time.Second, maxBackoff))
	// dev now: 3 instances × 8, one cluster's share 4, 20 attempts from 10 s.
	assert.NoError(t, absorbsRepublish(3, 4, 20, 10*time.Second, maxBackoff))
	assert.Error(t, absorbsRepublish(1, 1, 20, 10*time.Second, maxBackoff))
}

// functionTimeout applies Cloud Functions' limit on a function's timeout
// ("Function timeout", cloud.google.com/functions/docs/configuring/timeout):
// at most 60 minutes for an HTTP function, 9 for an event-driven one.
func functionTimeout(seconds int, eventDriven bool) error {
	max := 3600
	if eventDriven {
		max = 540
	}
	if seconds < 1 || seconds > max {
		return fmt.Errorf("timeout %d s: Cloud Functions allows 1 to %d s for this function (event-driven: %t)", seconds, max, eventDriven)
	}
	return nil
}

// cloudRunSize is Cloud Run's rule for an instance's CPU, memory and
// request concurrency (Cloud Run's "Configure CPU limits" and "memory
// limits"; a function without available_cpu gets the CPU of its memory
// tier, from Cloud Functions' "Configure memory and vCPU limits").
func cloudRunSize(cpu, memory string, concurrency int) error {
	mem, err := memoryBytes(memory)
	if err != nil {
		return err
	}
	const mi, gi = 1 << 20, 1 << 30
	var vcpu float64
	if cpu == "" {
		tiers := []struct {
			mem float64
			cpu float64
		}{{128 * mi, 0.083}, {256 * mi, 0.167}, {512 * mi, 0.333}, {1 * gi, 0.583}, {2 * gi, 1}, {4 * gi, 2}, {8 * gi, 2}, {16 * gi, 4}, {32 * gi, 8}}
		for _, t := range tiers {
			if mem <= t.mem {
				vcpu = t.cpu
				break
			}
		}
		if vcpu == 0 {
			return fmt.Errorf("memory %s is above Cloud Run's 32 GiB", memory)
		}
	} else if vcpu, err = strconv.ParseFloat(cpu, 64); err != nil {
		return fmt.Errorf("cpu %q: %w", cpu, err)
	}
	if concurrency < 1 || concurrency > 1000 {
		return fmt.Errorf("concurrency %d: Cloud Run allows 1 to 1000", concurrency)
	}
	if vcpu < 1 {
		switch {
		case vcpu < 0.08:
			return fmt.Errorf("cpu %g: at least 0.08", vcpu)
		case concurrency != 1:
			return fmt.Errorf("cpu %g with concurrency %d: below 1 vCPU, Cloud Run requires concurrency 1", vcpu, concurrency)
		case vcpu < 0.5 && mem > 512*mi:
			return fmt.Errorf("cpu %g with memory %s: above 512 MiB needs at least 0.5 vCPU", vcpu, memory)
		case mem > 1*gi:
			return fmt.Errorf("cpu %g with memory %s: above 1 GiB needs at least 1 vCPU", vcpu, memory)
		}
		return nil
	}
	limits := map[float64][2]float64{1: {512 * mi, 4 * gi}, 2: {512 * mi, 8 * gi}, 4: {2 * gi, 16 * gi}, 6: {4 * gi, 24 * gi}, 8: {4 * gi, 32 * gi}}
	l, ok := limits[vcpu]
	if !ok {
		return fmt.Errorf("cpu %g: above 1, Cloud Run takes 1, 2, 4, 6 or 8", vcpu)
	}
	if mem < l[0] || mem > l[1] {
		return fmt.Errorf("cpu %g with memory %s: Cloud Run takes %s to %s", vcpu, memory, bytesString(l[0]), bytesString(l[1]))
	}
	return nil
}

func bytesString(b float64) string {
	if b >= 1<<30 {
		return fmt.Sprintf("%g GiB", b/(1<<30))
	}
	return fmt.Sprintf("%g MiB", b/(1<<20))
}

// memoryBytes parses a Cloud Functions memory size: 256M, 512Mi, 1Gi, 2G.
func memoryBytes(s string) (float64, error) {
	m := regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)(k|Ki|M|Mi|G|Gi)$`).FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("memory %q: not a size such as 512Mi", s)
	}
	n, _ := strconv.ParseFloat(m[1], 64)
	unit := map[string]float64{"k": 1e3, "Ki": 1 << 10, "M": 1e6, "Mi": 1 << 20, "G": 1e9, "Gi": 1 << 30}[m[2]]
	return math.Round(n * unit), nil
}

// queryGC checks a query function's garbage collector settings (GOGC and
// GOMEMLIMIT, read by the Go runtime): the memory limit within the
// instance's memory, with room for what is not Go's heap, and both the
// ones make bench runs BenchmarkReaders with (QUERY_GC in the Makefile),
// so that the benchmark measures the deployed instance.
func queryGC(tb testing.TB, serviceConfig map[string]any) error {
	env := serviceConfig["environment_variables"].(map[string]any)
	mem, err := memoryBytes(serviceConfig["available_memory"].(string))
	if err != nil {
		return err
	}
	limit, err := goMemLimit(fmt.Sprint(env["GOMEMLIMIT"]))
	if err != nil {
		return err
	}
	if limit < 0.8*mem || limit > 0.95*mem {
		return fmt.Errorf("GOMEMLIMIT %v: want 80%% to 95%% of the instance's %s", env["GOMEMLIMIT"], serviceConfig["available_memory"])
	}
	gogc, _ := env["GOGC"].(string)
	if gogc == "off" {
		// The collector then runs only as the heap nears the limit: the
		// view, the live heap's bulk, must leave it room to work in.
		view, err := memoryBytes(fmt.Sprint(env["VIEW_MAX_BYTES"]))
		if err != nil {
			return fmt.Errorf("VIEW_MAX_BYTES: %w", err)
		}
		if view > limit/2 {
			return fmt.Errorf("VIEW_MAX_BYTES %v with GOGC=off: want at most half of GOMEMLIMIT %v, or the collector runs without rest", env["VIEW_MAX_BYTES"], env["GOMEMLIMIT"])
		}
	} else if n, err := strconv.Atoi(gogc); err != nil || n < 100 {
		return fmt.Errorf("GOGC %q: want off or a percentage of at least Go's default, 100", gogc)
	}
	m := regexp.MustCompile(`(?m)^QUERY_GC := (.*)$`).FindSubmatch(mustRead(tb, "../Makefile"))
	if m == nil {
		return fmt.Errorf("the Makefile sets no QUERY_GC")
	}
	if want := fmt.Sprintf("GOGC=%s GOMEMLIMIT=%s", gogc, env["GOMEMLIMIT"]); string(m[1]) != want {
		return fmt.Errorf("the Makefile's QUERY_GC is %q, the deployed instance's %q", m[1], want)
	}
	return nil
}

// goMemLimit parses GOMEMLIMIT as the Go runtime does (package runtime,
// "Environment Variables"): a number of bytes with an optional unit, B,
// KiB, MiB, GiB or TiB.
func goMemLimit(s string) (float64, error) {
	m := regexp.MustCompile(`^([0-9]+)(B|KiB|MiB|GiB|TiB)?$`).FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("GOMEMLIMIT %q: not a size such as 460MiB", s)
	}
	n, _ := strconv.ParseFloat(m[1], 64)
	unit := map[string]float64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[m[2]]
	return n * unit, nil
}

// TestQueryGCRule guards the rule: it fails on a limit Go would not
// parse, one past the instance's memory, a GOGC below Go's default, a view
// that leaves the collector too little of the limit, and settings other
// than the benchmark's.
func TestQueryGCRule(t *testing.T) {
	sc := func(memory, gogc, limit, view string) map[string]any {
		return map[string]any{"available_memory": memory, "environment_variables": map[string]any{"GOGC": gogc, "GOMEMLIMIT": limit, "VIEW_MAX_BYTES": view}}
	}
	assert.NoError(t, queryGC(t, sc("512Mi", "off", "460MiB", "160Mi")))
	assert.NoError(t, queryGC(t, sc("512Mi", "off", "460MiB", "230Mi")))
	assert.ErrorContains(t, queryGC(t, sc("512Mi", "off", "460MiB", "231Mi")), "at most half of GOMEMLIMIT")
	assert.ErrorContains(t, queryGC(t, sc("512Mi", "off", "460MiB", "lots")), "VIEW_MAX_BYTES")
	assert.ErrorContains(t, queryGC(t, sc("512Mi", "off", "460MB", "160Mi")), "not a size")
	assert.ErrorContains(t, queryGC(t, sc("512Mi", "off", "512MiB", "160Mi")), "80% to 95%")
	assert.ErrorContains(t, queryGC(t, sc("1Gi", "off", "460MiB", "160Mi")), "80% to 95%")
	assert.ErrorContains(t, queryGC(t, sc("512Mi", "50", "460MiB", "160Mi")), "at least Go's default")
	assert.ErrorContains(t, queryGC(t, sc("512Mi", "", "460MiB", "160Mi")), "at least Go's default")
	assert.ErrorContains(t, queryGC(t, sc("512Mi", "400", "460MiB", "160Mi")), "QUERY_GC")
}

// TestFunctionTimeoutRule guards the rule: it fails where Cloud Functions
// would refuse the timeout.
func TestFunctionTimeoutRule(t *testing.T) {
	assert.NoError(t, functionTimeout(3600, false))
	assert.Error(t, functionTimeout(3601, false))
	assert.NoError(t, functionTimeout(540, true))
	assert.Error(t, functionTimeout(541, true))
	assert.Error(t, functionTimeout(0, false))
}

func TestCloudRunSizeRule(t *testing.T) {
	tests := []struct {
		cpu, memory string
		concurrency int
		wantErr     string
	}{
		{"", "256M", 40, "requires concurrency 1"}, // the query function before
		{"", "256M", 1, ""},
		{"1", "512Mi", 40, ""},
		{"1", "256Mi", 8, "512 MiB to 4 GiB"},
		{"1", "8Gi", 8, "512 MiB to 4 GiB"},
		{"2", "8Gi", 80, ""},
		{"3", "4Gi", 80, "1, 2, 4, 6 or 8"},
		{"0.5", "1Gi", 1, ""},
		{"0.4", "1Gi", 1, "at least 0.5 vCPU"},
		{"0.9", "2Gi", 1, "at least 1 vCPU"},
		{"", "2Gi", 80, ""},
		{"1", "512Mi", 1001, "1 to 1000"},
		{"1", "512MB", 1, "not a size"},
	}
	for _, tt := range tests {
		err := cloudRunSize(tt.cpu, tt.memory, tt.concurrency)
		name := fmt.Sprintf("cpu %q memory %s concurrency %d", tt.cpu, tt.memory, tt.concurrency)
		if tt.wantErr == "" {
			assert.NoError(t, err, name)
		} else {
			assert.ErrorContains(t, err, tt.wantErr, name)
		}
	}
	assert.True(t, strings.HasPrefix(bytesString(1<<30), "1 GiB"))
}

// Google's rules for workload identity pool and provider IDs: 4 to 32
// lowercase letters, digits or hyphens, and a pool ID may not start with
// gcp-; display names are at most 32 characters.
var workloadIdentityID = regexp.MustCompile(`^[a-z0-9-]{4,32}$`)

// TestEnvironmentsFederateClustersOutsideGKE plans dev and prod with a
// cluster outside GKE: its pool and provider have IDs Google accepts, and
// its topic, like every topic, validates against every revision of the
// event schema (no revision range), so that old and new publishers both
// publish while clusters upgrade one at a time.
func TestEnvironmentsFederateClustersOutsideGKE(t *testing.T) {
	for _, env := range []string{"dev", "prod"} {
		t.Run(env, func(t *testing.T) {
			res := planEnvironment(t, env, `{"eks-us-east-1" = {workload_identity_federation = {issuer_uri = "https://oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE"}}}`)
			pool := res[`module.fleetcast.google_iam_workload_identity_pool.cluster["eks-us-east-1"]`]
			require.NotNil(t, pool.Values, "the cluster's pool")
			id := pool.Values["workload_identity_pool_id"].(string)
			assert.Regexp(t, workloadIdentityID, id)
			assert.False(t, strings.HasPrefix(id, "gcp-"), "Google reserves pool IDs starting with gcp-")
			assert.LessOrEqual(t, len(pool.Values["display_name"].(string)), 32)
			provider := res[`module.fleetcast.google_iam_workload_identity_pool_provider.cluster["eks-us-east-1"]`]
			require.NotNil(t, provider.Values, "the cluster's provider")
			assert.Regexp(t, workloadIdentityID, provider.Values["workload_identity_pool_provider_id"].(string))
			assert.LessOrEqual(t, len(provider.Values["display_name"].(string)), 32)
			assert.Equal(t, "https://oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE", first(t, provider.Values["oidc"])["issuer_uri"])
			assert.NotEmpty(t, provider.Values["attribute_condition"], "the provider admits the publisher alone")
			// One binding, the federated publisher's: its member names the
			// pool, known only once it exists (the module's test checks it).
			var bindings []string
			for addr, r := range res {
				if r.Type == "google_service_account_iam_member" && r.Values["role"] == "roles/iam.workloadIdentityUser" {
					bindings = append(bindings, addr)
				}
			}
			assert.Equal(t, []string{`module.fleetcast.google_service_account_iam_member.publisher_federation["eks-us-east-1"]`}, bindings)

			settings := first(t, res[`module.fleetcast.google_pubsub_topic.events["eks-us-east-1"]`].Values["schema_settings"])
			assert.Empty(t, settings["first_revision_id"], "every schema revision validates")
			assert.Empty(t, settings["last_revision_id"], "every schema revision validates")
			assert.Equal(t, "JSON", settings["encoding"])
		})
	}
}

// TestEnvironmentsIndexOnlyWhatIsQueried plans dev and prod and checks the
// fleet documents' indexes against the code: every field of
// fleet.Document is either queried through its single-field index
// (firestoredb.QueriedFleetFields, which keep Firestore's automatic
// indexes) or exempt, never both; the composite indexes are exactly
// firestoredb.FleetIndexes. And against Google's rule for fields that
// increase with every write (Firestore's "sharded timestamps"): ingestedAt,
// observedAt and writtenAt have no single-field index, and every composite
// index holding writtenAt leads with the feed's shard. expireAt keeps its
// TTL.
func TestEnvironmentsIndexOnlyWhatIsQueried(t *testing.T) {
	var all []string
	doc := reflect.TypeFor[fleet.Document]()
	for i := range doc.NumField() {
		name, _, _ := strings.Cut(doc.Field(i).Tag.Get("firestore"), ",")
		all = append(all, name)
	}
	for _, env := range []string{"dev", "prod"} {
		t.Run(env, func(t *testing.T) {
			exempt := map[string]bool{}
			ttl := false
			var composite [][]string
			for _, r := range planEnvironment(t, env, "{}") {
				if r.Type == "google_firestore_index" && r.Values["collection"] == "fleets" {
					var fields []string
					for _, f := range r.Values["fields"].([]any) {
						f := f.(map[string]any)
						assert.Equal(t, "ASCENDING", f["order"], "%s: %s", r.Address, f["field_path"])
						fields = append(fields, f["field_path"].(string))
					}
					composite = append(composite, fields)
					continue
				}
				if r.Type != "google_firestore_field" || r.Values["collection"] != "fleets" {
					continue
				}
				field := r.Values["field"].(string)
				cfg, _ := r.Values["index_config"].([]any)
				require.Len(t, cfg, 1, "%s: an index_config", r.Address)
				if ix, _ := cfg[0].(map[string]any)["indexes"].([]any); len(ix) == 0 {
					exempt[field] = true
				}
				if tc, _ := r.Values["ttl_config"].([]any); field == "expireAt" && len(tc) == 1 {
					ttl = true
				}
			}
			for _, f := range firestoredb.QueriedFleetFields {
				assert.False(t, exempt[f], "%s is queried: it keeps its index", f)
			}
			for _, f := range all {
				assert.True(t, exempt[f] || slices.Contains(firestoredb.QueriedFleetFields, f),
					"fleet field %s is neither queried nor exempt from indexing: add it to fleet_unindexed_fields or to QueriedFleetFields", f)
			}
			assert.True(t, exempt["ingestedAt"] && exempt["observedAt"] && exempt["writtenAt"], "the fields that grow with every write have no single-field index")
			assert.ElementsMatch(t, firestoredb.FleetIndexes, composite, "the composite indexes are the queries'")
			for _, fields := range composite {
				if slices.Contains(fields, "writtenAt") {
					assert.Contains(t, []string{"feedShard", "cluster"}, fields[0], "an index holding writtenAt leads with a field that spreads its writes: %v", fields)
				}
			}
			assert.True(t, ttl, "expireAt keeps its TTL policy")
		})
	}
}
