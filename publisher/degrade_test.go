package publisher_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
)

// TestAPublisherWithoutGameServerSetsDegradesAndRecovers: a publisher
// whose Role lacks gameserversets and fleetautoscalers (an upgrade that
// did not update RBAC) publishes its fleets all the same, their rollout
// and autoscalers marked unknown; says so once at ERROR, in a metric and
// on /readyz (ready); and once the Role is fixed, publishes them whole.
// (It waited for those informers forever, and published nothing.)
func TestAPublisherWithoutGameServerSetsDegradesAndRecovers(t *testing.T) {
	e := newNamespace(t)
	ns := e.Name
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	_, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "publisher"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{"agones.dev"}, Resources: []string{"fleets"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}
	role, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "publisher"}, Rules: rules}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "publisher"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "publisher"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "publisher", Namespace: ns}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	tok, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "publisher",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	require.NoError(t, err)

	e.CreateFleet(ns, "lonely", nil)
	e.CreateGameServerSet(ns, "lonely", "lonely-v1", e.FleetTemplate(ns, "lonely"), 2)
	e.SetGameServerSetStatus(ns, "lonely-v1", map[string]any{"replicas": int64(2), "readyReplicas": int64(2)})

	rec := newRecorder()
	cfg := kubetest.Config("degrade", ns)
	cfg.MetricsAddr = freeAddr(t)
	base := "http://" + cfg.MetricsAddr
	kubetest.StartPublisher(t, cfg, cp.RESTConfigWithToken(tok.Status.Token), rec)
	s := rec.waitForState(t, "the fleet, published without its set", "lonely", func(fleet.State) bool { return true })
	assert.False(t, s.Rollout.Known(), "unknown, not incomplete")
	assert.Contains(t, s.Degraded, "rollout unknown (cannot list gameserversets)")
	assert.Contains(t, s.Degraded, "autoscalers unknown (cannot list fleetautoscalers)")

	code, body := get(t, base+"/readyz")
	assert.Equal(t, http.StatusOK, code, "ready: it publishes")
	assert.Contains(t, body, "degraded: cannot list gameserversets in "+ns)
	assert.Contains(t, body, "forbidden")
	_, metrics := get(t, base+"/metrics")
	assert.Contains(t, metrics, `fleetcast_publisher_source_listed{namespace="`+ns+`",resource="gameserversets"} 0`)

	// The Role is fixed: within the informer's retry (at most 30 s).
	role.Rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{"agones.dev", "autoscaling.agones.dev"},
		Resources: []string{"gameserversets", "fleetautoscalers"}, Verbs: []string{"get", "list", "watch"}})
	_, err = kube.RbacV1().Roles(ns).Update(ctx, role, metav1.UpdateOptions{})
	require.NoError(t, err)
	s = rec.waitForStateWithin(t, 90*time.Second, "the fleet, whole again", "lonely", func(s fleet.State) bool { return s.Rollout.Known() && s.Degraded == "" })
	assert.Empty(t, s.Degraded)
	assert.Equal(t, []fleet.GameServerSet{{Name: "lonely-v1", Current: true, Replicas: 2, ReadyReplicas: 2}}, s.Rollout.Sets)
	require.Eventually(t, func() bool {
		_, body := get(t, base+"/readyz")
		_, metrics := get(t, base+"/metrics")
		return !strings.Contains(body, "degraded") &&
			strings.Contains(metrics, `fleetcast_publisher_source_listed{namespace="`+ns+`",resource="fleetautoscalers"} 1`)
	}, 90*time.Second, 100*time.Millisecond)
}
