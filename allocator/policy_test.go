package allocator

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePoliciesReadsAgonesPolicies(t *testing.T) {
	b, err := os.ReadFile("testdata/policies.yaml")
	require.NoError(t, err)
	got, err := ParsePolicies(b)
	require.NoError(t, err)
	assert.Equal(t, []Policy{
		{Name: "pc-eu", Labels: map[string]string{"tier": "gold"}, Priority: 0, Weight: 100, Cluster: "pc-eu",
			Endpoints: []string{"34.82.195.204", "allocator.pc-eu.example:8443"}, SecretName: "allocator-client-pc-eu", Namespace: "games",
			ServerCA: []byte("-----BEGIN CERTIFICATE-----\n")},
		{Name: "ps5-eu", Priority: 1, Weight: 0, Cluster: "ps5-eu", SecretName: "allocator-client-ps5-eu"},
		{Name: "pc-us", Priority: 0, Weight: 50, Cluster: "pc-us", Endpoints: []string{"10.0.0.7"}, SecretName: "allocator-client-pc-us"},
	}, got)
}

func TestParsePoliciesRefusesNamingThePolicyAndField(t *testing.T) {
	policy := func(spec string) string {
		return "apiVersion: multicluster.agones.dev/v1\nkind: GameServerAllocationPolicy\nmetadata: {name: p}\nspec:\n" + spec
	}
	ok := "  priority: 0\n  weight: 1\n  connectionInfo: {clusterName: pc, secretName: s}\n"
	for name, c := range map[string]struct{ yaml, want string }{
		"kind":       {strings.Replace(policy(ok), "GameServerAllocationPolicy", "GameServerAllocation", 1), `want multicluster.agones.dev/v1 GameServerAllocationPolicy`},
		"priority":   {policy("  weight: 1\n  connectionInfo: {clusterName: pc, secretName: s}\n"), `"p": spec.priority`},
		"weight":     {policy("  priority: 0\n  weight: -1\n  connectionInfo: {clusterName: pc, secretName: s}\n"), `"p": spec.weight`},
		"cluster":    {policy("  priority: 0\n  weight: 1\n  connectionInfo: {clusterName: clusterA, secretName: s}\n"), `spec.connectionInfo.clusterName: cluster "clusterA"`},
		"endpoint":   {policy("  priority: 0\n  weight: 1\n  connectionInfo: {clusterName: pc, secretName: s, allocationEndpoints: ['a b']}\n"), `allocationEndpoints[0]`},
		"secret":     {policy("  priority: 0\n  weight: 1\n  connectionInfo: {clusterName: pc}\n"), `spec.connectionInfo.secretName`},
		"server CA":  {policy("  priority: 0\n  weight: 1\n  connectionInfo: {clusterName: pc, secretName: s, serverCa: '%%%'}\n"), `spec.connectionInfo.serverCa`},
		"namespace":  {policy("  priority: 0\n  weight: 1\n  connectionInfo: {clusterName: pc, secretName: s, namespace: Games}\n"), `spec.connectionInfo.namespace`},
		"twice":      {policy(ok) + "---\n" + policy(ok), `cluster "pc" already has policy "p"`},
		"not YAML":   {"{", "document 1"},
		"wrong type": {policy("  priority: first\n"), "document 1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParsePolicies([]byte(c.yaml))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestEndpointAddress(t *testing.T) {
	for in, want := range map[string]string{"10.0.0.7": "10.0.0.7:443", "a.example:8443": "a.example:8443", "[::1]:9": "[::1]:9", "::1": "[::1]:443"} {
		got, err := EndpointAddress(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got)
	}
	for _, in := range []string{"", "a b", "a.example:0", "a.example:x", ":443"} {
		_, err := EndpointAddress(in)
		assert.Error(t, err, in)
	}
}
