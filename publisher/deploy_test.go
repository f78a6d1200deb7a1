package publisher_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/kubetest"
	"github.com/fleetcast/fleetcast/publisher"
)

// TestShippedManifestsGrantEnoughAndNoMore applies publisher/deploy to the
// real API server (a server-side dry run first, as a user would check), then
// runs the publisher with a token of the shipped ServiceAccount.
func TestShippedManifestsGrantEnoughAndNoMore(t *testing.T) {
	c := controlplane.Require(t, cp, cpErr)
	e := newNamespace(t)
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig())
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleetcast"}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}

	out, err := c.Kubectl(ctx, "apply", "--server-side", "--dry-run=server", "-k", "deploy")
	require.NoError(t, err)
	for _, obj := range []string{"serviceaccount/fleetcast-publisher", "clusterrole.rbac.authorization.k8s.io/fleetcast-publisher", "role.rbac.authorization.k8s.io/fleetcast-publisher", "deployment.apps/fleetcast-publisher"} {
		assert.Contains(t, out, obj+" serverside-applied (server dry run)")
	}
	_, err = c.Kubectl(ctx, "apply", "--server-side", "-k", "deploy")
	require.NoError(t, err)

	tok, err := kube.CoreV1().ServiceAccounts("fleetcast").CreateToken(ctx, "fleetcast-publisher",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	require.NoError(t, err)
	sa := c.RESTConfigWithToken(tok.Status.Token)

	t.Run("the publisher works with the shipped roles", func(t *testing.T) {
		rec := newRecorder()
		cfg := kubetest.Config("rbac", e.Name)
		cfg.Namespaces = nil // every namespace: the ClusterRole allows it
		cfg.LeaderElect = true
		cfg.LeaseNamespace = "fleetcast"
		kubetest.StartPublisher(t, cfg, sa, rec)
		e.CreateFleet(e.Name, "allowed", nil)
		rec.waitFor(t, "the fleet's upsert", func(evs []fleet.Event) bool {
			for _, ev := range evs {
				if ev.Kind == fleet.KindUpsert && ev.Name == "allowed" {
					return true
				}
			}
			return false
		})
	})
	t.Run("and nothing more", func(t *testing.T) {
		saKube := kubernetes.NewForConfigOrDie(sa)
		for ns, want := range map[string][]string{
			e.Name:      {"agones.dev/fleets get,list,watch", "agones.dev/gameserversets get,list,watch", "autoscaling.agones.dev/fleetautoscalers get,list,watch"},
			"fleetcast": {"agones.dev/fleets get,list,watch", "agones.dev/gameserversets get,list,watch", "autoscaling.agones.dev/fleetautoscalers get,list,watch", "coordination.k8s.io/leases create,get,update"},
		} {
			assert.Equal(t, want, grantedBeyondDefaults(t, c, e.Name, saKube, ns), "namespace %s", ns)
		}
		_, err := saKube.CoreV1().Secrets("fleetcast").List(ctx, metav1.ListOptions{})
		assert.True(t, apierrors.IsForbidden(err), "listing secrets: %v", err)
		_, err = saKube.CoreV1().Pods(e.Name).List(ctx, metav1.ListOptions{})
		assert.True(t, apierrors.IsForbidden(err), "listing pods: %v", err)
		_, err = saKube.CoordinationV1().Leases(e.Name).List(ctx, metav1.ListOptions{})
		assert.True(t, apierrors.IsForbidden(err), "leases outside its namespace: %v", err)
		_, err = dynamic.NewForConfigOrDie(sa).Resource(publisher.FleetGVR).Namespace(e.Name).
			Patch(ctx, "allowed", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
		assert.True(t, apierrors.IsForbidden(err), "changing a fleet: %v", err)
	})
}

// grantedBeyondDefaults is what the API server says client may do in ns
// (a SelfSubjectRulesReview), as "group/resource verbs", sorted, less what
// a service account of home bound to nothing may (discovery, self reviews,
// the cluster's defaults for every authenticated user).
func grantedBeyondDefaults(t *testing.T, c *controlplane.ControlPlane, home string, client kubernetes.Interface, ns string) []string {
	t.Helper()
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig())
	_, err := kube.CoreV1().ServiceAccounts(home).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	tok, err := kube.CoreV1().ServiceAccounts(home).CreateToken(ctx, "nobody",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	require.NoError(t, err)
	rules := func(client kubernetes.Interface) []string {
		review, err := client.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
			Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
		var out []string
		for _, rule := range review.Status.ResourceRules {
			verbs := strings.Join(slices.Sorted(slices.Values(rule.Verbs)), ",")
			for _, g := range rule.APIGroups {
				for _, r := range rule.Resources {
					out = append(out, g+"/"+r+" "+verbs)
				}
			}
		}
		return out
	}
	baseline := rules(kubernetes.NewForConfigOrDie(c.RESTConfigWithToken(tok.Status.Token)))
	got := slices.DeleteFunc(rules(client), func(r string) bool { return slices.Contains(baseline, r) })
	slices.Sort(got)
	return got
}

func ptr[T any](v T) *T { return &v }
