// Package terraform_test cross-checks the Terraform configuration against
// the code it deploys: entry points, environment variables and the event
// schema must agree, or a deploy that validates would still fail at run
// time.
package terraform_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zclconf/go-cty/cty"
	"sigs.k8s.io/yaml"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/functions/fnruntime"
	"github.com/fleetcast/fleetcast/functions/ingest"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/schemas"
)

const moduleDir = "modules/fleetcast"

func moduleBody(tb testing.TB) *hclsyntax.Body {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(moduleDir, "*.tf"))
	require.NoError(tb, err)
	require.Contains(tb, files, filepath.Join(moduleDir, "main.tf"))
	// The module is every .tf file of its directory, as Terraform reads it.
	all := &hclsyntax.Body{Attributes: hclsyntax.Attributes{}}
	p := hclparse.NewParser()
	for _, name := range files {
		f, diags := p.ParseHCLFile(name)
		require.False(tb, diags.HasErrors(), diags.Error())
		body := f.Body.(*hclsyntax.Body)
		all.Blocks = append(all.Blocks, body.Blocks...)
		for k, a := range body.Attributes {
			all.Attributes[k] = a
		}
	}
	return all
}

func resources(body *hclsyntax.Body, typ string) map[string]*hclsyntax.Block {
	out := map[string]*hclsyntax.Block{}
	for _, b := range body.Blocks {
		if b.Type == "resource" && b.Labels[0] == typ {
			out[b.Labels[1]] = b
		}
	}
	return out
}

func block(b *hclsyntax.Block, typ string) *hclsyntax.Block {
	for _, c := range b.Body.Blocks {
		if c.Type == typ {
			return c
		}
	}
	return nil
}

func literal(tb testing.TB, e hclsyntax.Expression) string {
	tb.Helper()
	v, diags := e.Value(nil)
	require.False(tb, diags.HasErrors(), "not a literal: %s", diags.Error())
	return v.AsString()
}

// registeredFunctions reads the names the root package registers in its
// init (functions.CloudEvent / functions.HTTP), the package the buildpack
// builds.
func registeredFunctions(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob("../*.go")
	require.NoError(tb, err)
	var names []string
	for _, path := range files {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		require.NoError(tb, err)
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "CloudEvent" && sel.Sel.Name != "HTTP") || len(call.Args) == 0 {
				return true
			}
			if lit, ok := call.Args[0].(*ast.BasicLit); ok {
				name, err := strconv.Unquote(lit.Value)
				require.NoError(tb, err)
				names = append(names, name)
			}
			return true
		})
	}
	slices.Sort(names)
	return names
}

// TestTheFunctionsAreCreatedAfterTheirIndexes: Firestore refuses a query
// whose composite index is missing or building, so a function must not
// run before the indexes of its queries are built: the ingest's snapshots
// aggregate through the reconcile index, the query side follows the feed,
// a query partition its clusters' feed. Every index is some function's,
// and none skips the wait for its build.
func TestTheFunctionsAreCreatedAfterTheirIndexes(t *testing.T) {
	body := moduleBody(t)
	indexes := resources(body, "google_firestore_index")
	functions := resources(body, "google_cloudfunctions2_function")
	services := resources(body, "google_cloud_run_v2_service")
	waits := map[string][]*hclsyntax.Block{
		"fleet_reconcile":       {functions["ingest"], services["ingest"]},
		"fleet_feed":            {functions["query"], services["query"]},
		"fleet_feed_by_cluster": {functions["query"]},
	}
	require.ElementsMatch(t, slices.Collect(maps.Keys(indexes)), slices.Collect(maps.Keys(waits)), "every index is some function's")
	for name, ix := range indexes {
		for _, b := range waits[name] {
			require.NotNil(t, b, name)
			assert.Contains(t, dependsOn(t, b), "google_firestore_index."+name, "%s.%s waits for its index", b.Labels[0], b.Labels[1])
		}
		// The provider waits for a created index to be built unless told
		// to skip that wait, which would make the dependency hollow.
		_, skips := ix.Body.Attributes["skip_wait"]
		assert.False(t, skips, "google_firestore_index.%s must not skip the wait for its build", name)
	}
}

// dependsOn lists the resources a block's depends_on names.
func dependsOn(t *testing.T, b *hclsyntax.Block) []string {
	t.Helper()
	attr, ok := b.Body.Attributes["depends_on"]
	require.True(t, ok, "%s.%s has no depends_on", b.Labels[0], b.Labels[1])
	var deps []string
	for _, v := range attr.Expr.(*hclsyntax.TupleConsExpr).Exprs {
		if tr, ok := v.(*hclsyntax.ScopeTraversalExpr); ok {
			var parts []string
			for _, step := range tr.Traversal {
				switch s := step.(type) {
				case hcl.TraverseRoot:
					parts = append(parts, s.Name)
				case hcl.TraverseAttr:
					parts = append(parts, s.Name)
				}
			}
			deps = append(deps, strings.Join(parts, "."))
		}
	}
	return deps
}

func TestEntryPointsAreTheRegisteredFunctions(t *testing.T) {
	var entryPoints []string
	for name, fn := range resources(moduleBody(t), "google_cloudfunctions2_function") {
		bc := block(fn, "build_config")
		require.NotNil(t, bc, name)
		entryPoints = append(entryPoints, literal(t, bc.Body.Attributes["entry_point"].Expr))
	}
	slices.Sort(entryPoints)
	entryPoints = slices.Compact(entryPoints) // the query partitions run QueryFleets too
	assert.Equal(t, registeredFunctions(t), entryPoints)
	assert.Equal(t, []string{"IngestFleetEvents", "QueryFleets"}, entryPoints)
}

// objectKeys lists the keys of an object expression, following merge()
// and references to locals.
func objectKeys(tb testing.TB, body *hclsyntax.Body, e hclsyntax.Expression) []string {
	tb.Helper()
	switch e := e.(type) {
	case *hclsyntax.ObjectConsExpr:
		var keys []string
		for _, item := range e.Items {
			keys = append(keys, hcl.ExprAsKeyword(item.KeyExpr))
		}
		return keys
	case *hclsyntax.FunctionCallExpr:
		require.Equal(tb, "merge", e.Name)
		var keys []string
		for _, a := range e.Args {
			for _, k := range objectKeys(tb, body, a) {
				if !slices.Contains(keys, k) { // a later argument's value replaces the earlier's
					keys = append(keys, k)
				}
			}
		}
		return keys
	case *hclsyntax.ScopeTraversalExpr:
		require.Equal(tb, "local", e.Traversal.RootName())
		name := e.Traversal[1].(hcl.TraverseAttr).Name
		for _, b := range body.Blocks {
			if b.Type == "locals" {
				if a, ok := b.Body.Attributes[name]; ok {
					return objectKeys(tb, body, a.Expr)
				}
			}
		}
		tb.Fatalf("local.%s not found", name)
	}
	tb.Fatalf("cannot read the keys of %T", e)
	return nil
}

// readVariables records the environment variables a configuration
// function reads.
func readVariables(read ...func(getenv func(string) string)) []string {
	seen := map[string]bool{}
	getenv := func(name string) string {
		seen[name] = true
		if name == "GOOGLE_CLOUD_PROJECT" {
			return "p" // no project detection, which would dial the metadata server
		}
		return ""
	}
	for _, r := range read {
		r(getenv)
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func TestEnvironmentVariablesAreTheOnesTheCodeReads(t *testing.T) {
	t.Setenv("FIRESTORE_EMULATOR_HOST", "127.0.0.1:1") // the client is created, never dialled
	firestore := func(getenv func(string) string) {
		if c, err := fnruntime.Firestore(t.Context(), getenv); err == nil {
			_ = c.Close()
		}
	}
	want := map[string][]string{
		"IngestFleetEvents": readVariables(firestore, func(g func(string) string) { _, _ = ingest.ConfigFromEnv(g) }),
		// The query side's include the garbage collector's settings,
		// which the Go runtime reads.
		"QueryFleets": readVariables(firestore, func(g func(string) string) { _, _ = query.ConfigFromEnv(g); g("GOGC"); g("GOMEMLIMIT") }),
	}
	body := moduleBody(t)
	for name, fn := range resources(body, "google_cloudfunctions2_function") {
		entry := literal(t, block(fn, "build_config").Body.Attributes["entry_point"].Expr)
		env := objectKeys(t, body, block(fn, "service_config").Body.Attributes["environment_variables"].Expr)
		slices.Sort(env)
		assert.Equal(t, want[entry], env, "google_cloudfunctions2_function.%s sets exactly what %s reads", name, entry)
	}
	// The query and ingest services (cmd/fleetcast-query,
	// cmd/fleetcast-ingest) read their function's variables; PORT is
	// Cloud Run's, from the container port.
	for name, entry := range map[string]string{"query": "QueryFleets", "query_merged": "QueryFleets", "ingest": "IngestFleetEvents"} {
		svc := resources(body, "google_cloud_run_v2_service")[name]
		require.NotNil(t, svc, name)
		dyn := block(block(block(svc, "template"), "containers"), "dynamic")
		require.Equal(t, "env", dyn.Labels[0])
		env := objectKeys(t, body, dyn.Body.Attributes["for_each"].Expr)
		slices.Sort(env)
		assert.Equal(t, want[entry], env, "google_cloud_run_v2_service.%s sets exactly what %s reads", name, entry)
		assert.NotContains(t, env, "PORT", "Cloud Run sets PORT and refuses it among the variables")
	}
}

func TestTheTopicValidatesAgainstTheCodesSchema(t *testing.T) {
	schema := resources(moduleBody(t), "google_pubsub_schema")["fleet_event"]
	require.NotNil(t, schema)
	call, ok := schema.Body.Attributes["definition"].Expr.(*hclsyntax.FunctionCallExpr)
	require.True(t, ok && call.Name == "file", "definition = file(...)")
	tmpl, ok := call.Args[0].(*hclsyntax.TemplateExpr)
	require.True(t, ok)
	var path strings.Builder
	for _, part := range tmpl.Parts {
		switch p := part.(type) {
		case *hclsyntax.ScopeTraversalExpr:
			require.Equal(t, "path.module", string(bytes.TrimSpace(p.Range().SliceBytes(mustRead(t, filepath.Join(moduleDir, "main.tf"))))))
			path.WriteString(moduleDir)
		default:
			path.WriteString(literal(t, p))
		}
	}
	b, err := os.ReadFile(path.String())
	require.NoError(t, err)
	assert.Equal(t, string(schemas.FleetEventAvro), string(b), "the topic's schema file is the one the code embeds")
}

func mustRead(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	require.NoError(tb, err)
	return b
}

// TestValidateIsReal: terraform validate must fail on an argument the
// Google provider does not have, in a scratch copy, and pass on the copy
// as it is — so a green validate in make test means something.
func TestValidateIsReal(t *testing.T) {
	if os.Getenv("FLEETCAST_TF_PROVIDER_DIR") == "" {
		if os.Getenv("REQUIRE_TERRAFORM") == "1" {
			t.Fatal("FLEETCAST_TF_PROVIDER_DIR is not set but REQUIRE_TERRAFORM=1: make test builds the provider")
		}
		t.Skip("needs the Google provider built for offline Terraform; run make test")
	}
	scratch := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(scratch, "terraform"), os.DirFS(".")))
	require.NoError(t, os.CopyFS(filepath.Join(scratch, "schemas"), os.DirFS("../schemas")))
	module := filepath.Join(scratch, "terraform", moduleDir)
	script := mustAbs(t, "../scripts/terraform.sh")
	validate := func() (string, error) {
		cmd := exec.Command(script, "--", "validate", "-no-color")
		cmd.Dir = module
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	require.NoError(t, os.RemoveAll(filepath.Join(module, ".terraform")))
	out, err := validate()
	require.NoError(t, err, "the unmodified copy validates:\n%s", out)

	main := filepath.Join(module, "main.tf")
	b := mustRead(t, main)
	broken := strings.Replace(string(b), `  message_retention_duration = local.message_retention`, "  message_retention_duration = local.message_retention\n  retention_forever          = true", 1)
	require.NotEqual(t, string(b), broken)
	require.NoError(t, os.WriteFile(main, []byte(broken), 0o644))
	out, err = validate()
	require.Error(t, err, "validate must reject an argument the provider does not know:\n%s", out)
	assert.Contains(t, out, `An argument named "retention_forever" is not expected here`)
}

func mustAbs(tb testing.TB, path string) string {
	tb.Helper()
	abs, err := filepath.Abs(path)
	require.NoError(tb, err)
	return abs
}

// TestTheAPIDocumentNamesWhatTerraformDeploys: the OpenAPI document's
// server is the Cloud Run URL of the query function as the module names
// it (with the default name_prefix), that URL is an output, and the
// document asks for the ID token the function's IAM requires.
func TestTheAPIDocumentNamesWhatTerraformDeploys(t *testing.T) {
	var doc struct {
		Servers []struct {
			URL       string `json:"url"`
			Variables map[string]struct {
				Default string `json:"default"`
			} `json:"variables"`
		} `json:"servers"`
		Security   []map[string][]string `json:"security"`
		Components struct {
			SecuritySchemes map[string]struct {
				Type, Scheme string
			} `json:"securitySchemes"`
		} `json:"components"`
	}
	require.NoError(t, yaml.Unmarshal(schemas.QueryAPIOpenAPI, &doc))
	require.Len(t, doc.Servers, 1)
	assert.Equal(t, "https://{service}-{hash}-{regionCode}.a.run.app", doc.Servers[0].URL, "a Cloud Run service's URL")

	vars, diags := hclparse.NewParser().ParseHCLFile(filepath.Join(moduleDir, "variables.tf"))
	require.False(t, diags.HasErrors(), diags.Error())
	prefix := ""
	for _, b := range vars.Body.(*hclsyntax.Body).Blocks {
		if b.Type == "variable" && b.Labels[0] == "name_prefix" {
			prefix = literal(t, b.Body.Attributes["default"].Expr)
		}
	}
	fn := resources(moduleBody(t), "google_cloudfunctions2_function")["query"]
	require.NotNil(t, fn)
	// The query function of every cluster (each.key "all").
	name, diags := fn.Body.Attributes["name"].Expr.Value(&hcl.EvalContext{Variables: map[string]cty.Value{
		"var":  cty.ObjectVal(map[string]cty.Value{"name_prefix": cty.StringVal(prefix)}),
		"each": cty.ObjectVal(map[string]cty.Value{"key": cty.StringVal("all")}),
	}})
	require.False(t, diags.HasErrors(), diags.Error())
	assert.Equal(t, name.AsString(), doc.Servers[0].Variables["service"].Default)

	outputs, diags := hclparse.NewParser().ParseHCLFile(filepath.Join(moduleDir, "outputs.tf"))
	require.False(t, diags.HasErrors(), diags.Error())
	var url string
	for _, b := range outputs.Body.(*hclsyntax.Body).Blocks {
		if b.Type == "output" && b.Labels[0] == "query_url" {
			url = string(bytes.TrimSpace(b.Body.Attributes["value"].Expr.Range().SliceBytes(mustRead(t, filepath.Join(moduleDir, "outputs.tf")))))
		}
	}
	assert.Equal(t, "local.query_url", url, "query_url is the query side's URL")
	svc := resources(moduleBody(t), "google_cloud_run_v2_service")["query"]
	require.NotNil(t, svc)
	// The query service of every cluster (each.key "all").
	svcName, diags := svc.Body.Attributes["name"].Expr.Value(&hcl.EvalContext{Variables: map[string]cty.Value{
		"var":  cty.ObjectVal(map[string]cty.Value{"name_prefix": cty.StringVal(prefix)}),
		"each": cty.ObjectVal(map[string]cty.Value{"key": cty.StringVal("all")}),
	}})
	require.False(t, diags.HasErrors(), diags.Error())
	assert.Equal(t, name.AsString(), svcName.AsString(), "the function and the service have one name, the document's")

	require.Equal(t, []map[string][]string{{"googleIdToken": {}}}, doc.Security)
	assert.Equal(t, "http", doc.Components.SecuritySchemes["googleIdToken"].Type)
	assert.Equal(t, "bearer", doc.Components.SecuritySchemes["googleIdToken"].Scheme)
}

// TestTheIndexesAreTheQueries: the module's composite indexes on fleet
// documents, those it creates only for query partitions included, are
// exactly what firestoredb's queries need (FleetIndexes and
// PartitionFleetIndexes): Firestore refuses a query whose index is
// missing, and the emulator never asks for one.
func TestTheIndexesAreTheQueries(t *testing.T) {
	var got [][]string
	for name, ix := range resources(moduleBody(t), "google_firestore_index") {
		assert.Equal(t, "fleets", literal(t, ix.Body.Attributes["collection"].Expr), name)
		var fields []string
		for _, f := range ix.Body.Blocks {
			if f.Type == "fields" {
				assert.Equal(t, "ASCENDING", literal(t, f.Body.Attributes["order"].Expr), name)
				fields = append(fields, literal(t, f.Body.Attributes["field_path"].Expr))
			}
		}
		got = append(got, fields)
	}
	assert.ElementsMatch(t, slices.Concat(firestoredb.FleetIndexes, firestoredb.PartitionFleetIndexes), got)
}
