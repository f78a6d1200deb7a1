package publisher

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetcast/fleetcast/fleet"
)

func TestTemplateHashComparesAsAgonesDoes(t *testing.T) {
	user := map[string]any{"spec": map[string]any{
		"ports": []any{map[string]any{"containerPort": int64(7654)}},
		"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
			"name": "gs", "image": "game:1.42",
			"resources": map[string]any{"limits": map[string]any{"cpu": "1000m", "memory": "64Mi"}, "requests": map[string]any{"cpu": int64(1)}},
		}}}},
	}}
	fromGo := map[string]any{
		"metadata": map[string]any{"creationTimestamp": nil, "labels": map[string]any{}},
		"spec": map[string]any{
			"ports":  []any{map[string]any{"containerPort": float64(7654), "hostPort": int64(0), "protocol": ""}},
			"health": map[string]any{"disabled": false},
			"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
				"name": "gs", "image": "game:1.42",
				"resources": map[string]any{"limits": map[string]any{"cpu": "1", "memory": "64Mi"}, "requests": map[string]any{"cpu": "1"}},
			}}}},
		},
	}
	assert.Equal(t, templateHash(user), templateHash(fromGo), "zero values and quantity spellings do not make a template different")
	changed := map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"containerPort": int64(7655)}}}}
	assert.NotEqual(t, templateHash(user), templateHash(changed))
	image := map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "gs", "image": "game:1.43"}}}}}}
	assert.NotEqual(t, templateHash(user), templateHash(image))
}

// TestTrimmingKeepsTheGameServersLabels: the informer's copy of a Fleet
// loses its template but the template's labels, which Project reads.
func TestTrimmingKeepsTheGameServersLabels(t *testing.T) {
	obj := fleetObject(t, fullFleet)
	_, want, err := Projection{}.Project("pc", obj)
	require.NoError(t, err)
	trimmed, err := trimTemplate(obj.DeepCopy())
	require.NoError(t, err)
	u := trimmed.(*unstructured.Unstructured)
	tmpl, _, _ := unstructured.NestedMap(u.Object, "spec", "template")
	assert.Equal(t, map[string]any{"metadata": map[string]any{"labels": map[string]any{"mode": "ranked", "app.kubernetes.io/version": "1.42.0"}}}, tmpl)
	_, got, err := Projection{}.Project("pc", u)
	require.NoError(t, err)
	assert.Equal(t, want.GameServerLabels, got.GameServerLabels)

	bare := fleetObject(t, `{metadata: {name: a, namespace: b}, spec: {template: {spec: {}}}}`)
	trimmed, err = trimTemplate(bare)
	require.NoError(t, err)
	_, found, _ := unstructured.NestedFieldNoCopy(trimmed.(*unstructured.Unstructured).Object, "spec", "template")
	assert.False(t, found, "no labels: no template left")
}

func TestProjectAutoscalerPolicies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy map[string]any
		want   fleet.AutoscalerPolicy
	}{
		{"buffer, absolute", map[string]any{"type": "Buffer", "buffer": map[string]any{"bufferSize": int64(5), "maxReplicas": int64(10)}},
			fleet.AutoscalerPolicy{Type: "Buffer", BufferSize: "5", MaxReplicas: 10}},
		{"list", map[string]any{"type": "List", "list": map[string]any{"key": "players", "bufferSize": "10%", "maxCapacity": int64(100)}},
			fleet.AutoscalerPolicy{Type: "List", Key: "players", BufferSize: "10%", MaxCapacity: 100}},
		{"webhook service", map[string]any{"type": "Webhook", "webhook": map[string]any{"service": map[string]any{"name": "scaler", "namespace": "ops", "path": "/scale"}}},
			fleet.AutoscalerPolicy{Type: "Webhook", WebhookHost: "scaler.ops.svc"}},
		{"webhook URL with credentials", map[string]any{"type": "Webhook", "webhook": map[string]any{"url": "https://user:pw@scaler.example.com/x?k=v"}},
			fleet.AutoscalerPolicy{Type: "Webhook", WebhookHost: "scaler.example.com"}},
		{"chain: the type alone", map[string]any{"type": "Chain", "chain": []any{map[string]any{"id": "a"}}},
			fleet.AutoscalerPolicy{Type: "Chain"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "fas"}, "spec": map[string]any{"fleetName": "f", "policy": tc.policy}}}
			a, err := projectAutoscaler(u)
			require.NoError(t, err)
			assert.Equal(t, tc.want, a.Policy)
		})
	}
	bad := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "fas"}, "spec": map[string]any{"policy": map[string]any{"type": "Buffer"}}, "status": map[string]any{"lastScaleTime": "yesterday"}}}
	_, err := projectAutoscaler(bad)
	assert.ErrorContains(t, err, "lastScaleTime")
}
