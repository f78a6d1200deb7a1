package terraform_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// servicesNeeded is which Google APIs each resource type of the module
// calls when it is created. A type missing here fails the test below, so a
// new resource must say what it needs.
var servicesNeeded = map[string][]string{
	"data.google_project":       {"cloudresourcemanager.googleapis.com"},
	"google_project_iam_member": {"cloudresourcemanager.googleapis.com"},
	"google_service_account":    {"iam.googleapis.com"},
	// Custom roles are IAM's (projects.roles.create).
	"google_project_iam_custom_role": {"iam.googleapis.com"},
	// The repository and its IAM policy are Artifact Registry's API.
	"google_artifact_registry_repository":            {"artifactregistry.googleapis.com"},
	"google_artifact_registry_repository_iam_member": {"artifactregistry.googleapis.com"},
	"google_service_account_iam_member":              {"iam.googleapis.com"},
	"google_pubsub_schema":                           {"pubsub.googleapis.com"},
	"google_pubsub_topic":                            {"pubsub.googleapis.com"},
	"google_pubsub_subscription":                     {"pubsub.googleapis.com"},
	"google_pubsub_topic_iam_member":                 {"pubsub.googleapis.com"},
	"google_pubsub_subscription_iam_member":          {"pubsub.googleapis.com"},
	"google_firestore_database":                      {"firestore.googleapis.com"},
	"google_firestore_field":                         {"firestore.googleapis.com"},
	"google_firestore_index":                         {"firestore.googleapis.com"},
	"google_storage_bucket":                          {"storage.googleapis.com"},
	"google_storage_bucket_object":                   {"storage.googleapis.com"},
	"google_cloudfunctions2_function": {
		"cloudfunctions.googleapis.com", "cloudbuild.googleapis.com",
		"artifactregistry.googleapis.com", "run.googleapis.com",
	},
	"google_cloud_run_v2_service_iam_member":           {"run.googleapis.com"},
	"google_cloud_run_v2_service":                      {"run.googleapis.com"},
	"google_certificate_manager_trust_config":          {"certificatemanager.googleapis.com"},
	"google_certificate_manager_certificate":           {"certificatemanager.googleapis.com"},
	"google_certificate_manager_certificate_map":       {"certificatemanager.googleapis.com"},
	"google_certificate_manager_certificate_map_entry": {"certificatemanager.googleapis.com"},
	"google_network_security_server_tls_policy":        {"networksecurity.googleapis.com"},
	"google_compute_region_network_endpoint_group":     {"compute.googleapis.com"},
	"google_compute_backend_service":                   {"compute.googleapis.com"},
	"google_compute_url_map":                           {"compute.googleapis.com"},
	"google_compute_target_https_proxy":                {"compute.googleapis.com"},
	"google_compute_global_address":                    {"compute.googleapis.com"},
	"google_compute_global_forwarding_rule":            {"compute.googleapis.com"},
	"google_iam_workload_identity_pool":                {"iam.googleapis.com"},
	"google_iam_workload_identity_pool_provider":       {"iam.googleapis.com"},
	"google_logging_metric":                            {"logging.googleapis.com"},
	"google_logging_project_exclusion":                 {"logging.googleapis.com"},
	"google_monitoring_alert_policy":                   {"monitoring.googleapis.com"},
	"google_monitoring_custom_service":                 {"monitoring.googleapis.com"},
	"google_monitoring_slo":                            {"monitoring.googleapis.com"},
	"google_monitoring_dashboard":                      {"monitoring.googleapis.com"},
}

// servicesAtRunTime are APIs the deployed pipeline calls, not Terraform:
// the push subscription's OIDC tokens and Workload Identity go through IAM
// Credentials; a federated publisher exchanges its cluster's token at the
// Security Token Service first; spans go to the Telemetry API, which
// stores them in Cloud Trace.
var servicesAtRunTime = []string{"iamcredentials.googleapis.com", "sts.googleapis.com", "telemetry.googleapis.com", "cloudtrace.googleapis.com"}

// The wait after enabling the services, and the resource that enables them.
const (
	servicesWait    = "time_sleep.services"
	servicesEnabled = "google_project_service.this"
)

// TestEveryResourceWaitsForTheServicesItNeeds: on a fresh project every
// API is off, so each resource must come after the services it calls are
// enabled and the wait after them — through depends_on or through a
// reference to a resource that does — and those services must be in the
// module's list.
func TestEveryResourceWaitsForTheServicesItNeeds(t *testing.T) {
	body := moduleBody(t)
	g := dependencyGraph(t, body)
	enabled := enabledServices(t, body)
	for _, want := range servicesAtRunTime {
		assert.Contains(t, enabled, want, "the pipeline calls %s at run time", want)
	}
	require.Contains(t, g, servicesWait)
	assert.True(t, g.reaches(servicesWait, servicesEnabled), "%s waits for %s", servicesWait, servicesEnabled)
	for addr := range g {
		if addr == servicesEnabled || addr == servicesWait || strings.HasPrefix(addr, "time_sleep.") && g.reaches(addr, servicesWait) {
			continue
		}
		typ := resourceType(addr)
		needs, ok := servicesNeeded[typ]
		if !assert.True(t, ok, "%s: add the APIs a %s calls to servicesNeeded", addr, typ) {
			continue
		}
		for _, s := range needs {
			assert.Contains(t, enabled, s, "%s needs %s enabled", addr, s)
		}
		assert.True(t, g.reaches(addr, servicesWait), "%s must depend on %s (depends_on, or a reference to a resource that does)", addr, servicesWait)
	}
}

// TestTheDependencyCheckSeesAMissingDependency: the check above would
// catch a resource that neither waits nor refers to one that does.
func TestTheDependencyCheckSeesAMissingDependency(t *testing.T) {
	src := `
resource "google_project_service" "this" {}
resource "time_sleep" "services" { depends_on = [google_project_service.this] }
resource "google_pubsub_topic" "a" { depends_on = [time_sleep.services] }
resource "google_pubsub_subscription" "b" { topic = google_pubsub_topic.a.id }
resource "google_pubsub_subscription" "c" { topic = local.name }
locals { name = "x" }
`
	f, diags := hclsyntax.ParseConfig([]byte(src), "test.tf", hcl.InitialPos)
	require.False(t, diags.HasErrors(), diags.Error())
	g := dependencyGraph(t, f.Body.(*hclsyntax.Body))
	assert.True(t, g.reaches("google_pubsub_subscription.b", servicesWait))
	assert.False(t, g.reaches("google_pubsub_subscription.c", servicesWait))
}

// graph maps a resource's address (type.name, data.type.name) to the
// addresses it depends on.
type graph map[string][]string

func (g graph) reaches(from, to string) bool {
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(a string) bool {
		if a == to {
			return true
		}
		if seen[a] {
			return false
		}
		seen[a] = true
		return slices.ContainsFunc(g[a], walk)
	}
	return walk(from)
}

func resourceType(addr string) string {
	parts := strings.Split(addr, ".")
	if parts[0] == "data" {
		return "data." + parts[1]
	}
	return parts[0]
}

// dependencyGraph reads every resource and data block of body: the
// resources each refers to in any argument or nested block (through locals
// too) and in depends_on.
func dependencyGraph(tb testing.TB, body *hclsyntax.Body) graph {
	tb.Helper()
	locals := map[string]hclsyntax.Expression{}
	for _, b := range body.Blocks {
		if b.Type == "locals" {
			for name, a := range b.Body.Attributes {
				locals[name] = a.Expr
			}
		}
	}
	var refs func(hcl.Traversal, map[string]bool) []string
	refs = func(tr hcl.Traversal, seenLocals map[string]bool) []string {
		root := tr.RootName()
		switch root {
		case "var", "path", "each", "count", "self", "terraform":
			return nil
		case "local":
			name := tr[1].(hcl.TraverseAttr).Name
			if seenLocals[name] {
				return nil
			}
			seenLocals[name] = true
			var out []string
			for _, v := range locals[name].Variables() {
				out = append(out, refs(v, seenLocals)...)
			}
			return out
		case "data":
			return []string{"data." + tr[1].(hcl.TraverseAttr).Name + "." + tr[2].(hcl.TraverseAttr).Name}
		}
		return []string{root + "." + tr[1].(hcl.TraverseAttr).Name}
	}
	g := graph{}
	for _, b := range body.Blocks {
		if b.Type != "resource" && b.Type != "data" {
			continue
		}
		addr := b.Labels[0] + "." + b.Labels[1]
		if b.Type == "data" {
			addr = "data." + addr
		}
		var deps []string
		var walk func(*hclsyntax.Body)
		walk = func(body *hclsyntax.Body) {
			for _, a := range body.Attributes {
				for _, v := range a.Expr.Variables() {
					deps = append(deps, refs(v, map[string]bool{})...)
				}
			}
			for _, nested := range body.Blocks {
				walk(nested.Body)
			}
		}
		walk(b.Body)
		g[addr] = deps
	}
	return g
}

// enabledServices reads local.services, the module's list of APIs.
func enabledServices(tb testing.TB, body *hclsyntax.Body) []string {
	tb.Helper()
	for _, b := range body.Blocks {
		if b.Type != "locals" {
			continue
		}
		if a, ok := b.Body.Attributes["services"]; ok {
			out := literalList(tb, a.Expr)
			// The load balancer's, enabled with it.
			if m, ok := b.Body.Attributes["mtls_services"]; ok {
				out = append(out, literalList(tb, m.Expr)...)
			}
			return out
		}
	}
	tb.Fatal("local.services not found")
	return nil
}

func literalList(tb testing.TB, e hclsyntax.Expression) []string {
	tb.Helper()
	v, diags := e.Value(nil)
	require.False(tb, diags.HasErrors(), diags.Error())
	var out []string
	for _, s := range v.AsValueSlice() {
		out = append(out, s.AsString())
	}
	return out
}
