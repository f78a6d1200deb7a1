package query_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/fleetcast/fleetcast/fleetapi/fleetmetrics"
	"github.com/fleetcast/fleetcast/functions/query"
)

// servedLabels lists each family's label names, empty values included.
func servedLabels(mfs map[string]*dto.MetricFamily) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for name, mf := range mfs {
		out[name] = map[string]bool{}
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				out[name][lp.GetName()] = true
			}
		}
	}
	return out
}

// checkPromQL parses q with Prometheus' own parser and checks that every
// metric it selects is served, and every label it matches or groups by is
// one that metric carries, in each shape /metrics answers.
func checkPromQL(t *testing.T, where, q string, shapes map[string]map[string]map[string]bool) {
	t.Helper()
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(q)
	if !assert.NoError(t, err, "%s: %s", where, q) {
		return
	}
	selected := func(node parser.Node) []*parser.VectorSelector {
		var out []*parser.VectorSelector
		parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				out = append(out, vs)
			}
			return nil
		})
		return out
	}
	for shape, served := range shapes {
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			switch n := n.(type) {
			case *parser.VectorSelector:
				carried, ok := served[n.Name]
				if !assert.True(t, ok, "%s (%s): %q selects %s, which /metrics does not serve", where, shape, q, n.Name) {
					return nil
				}
				for _, m := range n.LabelMatchers {
					if m.Name != labels.MetricName {
						assert.True(t, carried[m.Name], "%s (%s): %s has no label %s", where, shape, n.Name, m.Name)
					}
				}
			case *parser.AggregateExpr:
				for _, vs := range selected(n.Expr) {
					for _, l := range n.Grouping {
						assert.True(t, served[vs.Name][l], "%s (%s): %q groups %s by %s, which it does not carry", where, shape, q, vs.Name, l)
					}
				}
			}
			return nil
		})
	}
}

// metricsShapes scrapes /metrics per fleet and summed, over fleets with
// the platform and version labels that METRICS_LABELS names.
func metricsShapes(t *testing.T) map[string]map[string]map[string]bool {
	shapes := map[string]map[string]map[string]bool{}
	for shape, aggregate := range map[string]bool{"per fleet": false, "summed": true} {
		srv, mem := serverWith(t, query.WithMetrics(fleetmetrics.Options{Labels: []string{"platform", "version"}, Aggregate: aggregate}))
		withRollout(t, mem)
		shapes[shape] = servedLabels(scrape(t, srv.URL))
		require.Contains(t, shapes[shape], "fleetcast_fleet_list_available", "every family is served")
	}
	return shapes
}

// TestTheGrafanaDashboardReadsWhatMetricsServes: every query of
// monitoring/grafana-capacity.json parses as PromQL and names only
// metrics and labels /metrics serves, per fleet and summed.
func TestTheGrafanaDashboardReadsWhatMetricsServes(t *testing.T) {
	shapes := metricsShapes(t)
	b, err := os.ReadFile("../../monitoring/grafana-capacity.json")
	require.NoError(t, err)
	var dash map[string]any
	require.NoError(t, json.Unmarshal(b, &dash))
	assert.Equal(t, "fleetcast-capacity", dash["uid"])
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "expr" {
					exprs = append(exprs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(dash["panels"])
	require.GreaterOrEqual(t, len(exprs), 10)
	for _, q := range exprs {
		checkPromQL(t, "grafana-capacity.json", q, shapes)
	}
	// The template's label_values(metric, label) is Grafana's, not PromQL.
	labelValues := regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*), *([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	vars := dash["templating"].(map[string]any)["list"].([]any)
	checked := 0
	for _, v := range vars {
		def, _ := v.(map[string]any)["definition"].(string)
		if def == "" {
			continue
		}
		m := labelValues.FindStringSubmatch(def)
		require.NotNil(t, m, def)
		for shape, served := range shapes {
			assert.True(t, served[m[1]][m[2]], "%s (%s): %s has no label %s", def, shape, m[1], m[2])
		}
		checked++
	}
	assert.Equal(t, 1, checked)
}

// TestTheKEDAScaledObjectReadsWhatMetricsServes: the prometheus trigger's
// query parses and names what /metrics serves; the gcp-stackdriver
// trigger's filter names a served metric as Managed Service for
// Prometheus writes it (prometheus.googleapis.com/<name>/gauge), and
// labels that metric carries.
func TestTheKEDAScaledObjectReadsWhatMetricsServes(t *testing.T) {
	shapes := metricsShapes(t)
	b, err := os.ReadFile("../../monitoring/keda-scaledobject.yaml")
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var obj struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Spec       struct {
				Triggers []struct {
					Type     string            `json:"type"`
					Metadata map[string]string `json:"metadata"`
				} `json:"triggers"`
			} `json:"spec"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
		kinds[obj.Kind]++
		assert.Equal(t, "keda.sh/v1alpha1", obj.APIVersion)
		for _, tr := range obj.Spec.Triggers {
			switch tr.Type {
			case "prometheus":
				checkPromQL(t, "keda prometheus trigger", tr.Metadata["query"], shapes)
				assert.NotEmpty(t, tr.Metadata["threshold"])
			case "gcp-stackdriver":
				filter := tr.Metadata["filter"]
				m := regexp.MustCompile(`metric\.type="prometheus\.googleapis\.com/([a-zA-Z_:][a-zA-Z0-9_:]*)/gauge"`).FindStringSubmatch(filter)
				require.NotNil(t, m, filter)
				for shape, served := range shapes {
					carried, ok := served[m[1]]
					assert.True(t, ok, "%s: %s is not served", shape, m[1])
					for _, l := range regexp.MustCompile(`metric\.labels\.([a-zA-Z_][a-zA-Z0-9_]*)`).FindAllStringSubmatch(filter, -1) {
						assert.True(t, carried[l[1]], "%s: %s has no label %s", shape, m[1], l[1])
					}
				}
				assert.NotEmpty(t, tr.Metadata["targetValue"])
			default:
				t.Errorf("trigger %s: not checked here", tr.Type)
			}
		}
	}
	assert.Equal(t, map[string]int{"ScaledObject": 1, "TriggerAuthentication": 1}, kinds)
}
