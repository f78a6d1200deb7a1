package terraform_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zclconf/go-cty/cty"
)

// TestTheProviderRangesAreWhatIsTested: the module and both examples admit
// each provider from the minor version the offline checks build
// (tools/terraform-provider-*) up to the next major, and no older one:
// a range reaching below it would promise versions nothing here runs.
func TestTheProviderRangesAreWhatIsTested(t *testing.T) {
	tested := map[string]string{
		"google": testedLine(t, "google", regexp.MustCompile(`The (\d+\.\d+)\.\d+ line of the Google provider`)),
		"time":   testedLine(t, "time", regexp.MustCompile(`(?m)^require github\.com/hashicorp/terraform-provider-time v(\d+\.\d+)\.\d+$`)),
	}
	want := map[string]string{}
	for name, line := range tested {
		major, err := strconv.Atoi(strings.Split(line, ".")[0])
		require.NoError(t, err)
		want[name] = fmt.Sprintf(">= %s, < %d.0", line, major+1)
	}
	for _, file := range []string{"modules/fleetcast/versions.tf", "examples/dev/main.tf", "examples/prod/main.tf"} {
		assert.Equal(t, want, providerConstraints(t, file), "%s: the providers' ranges", file)
	}
}

// testedLine is the minor version of the provider that tools/ pins, from
// its go.mod.
func testedLine(tb testing.TB, provider string, re *regexp.Regexp) string {
	tb.Helper()
	b, err := os.ReadFile("../tools/terraform-provider-" + provider + "/go.mod")
	require.NoError(tb, err)
	m := re.FindSubmatch(b)
	require.NotNil(tb, m, "tools/terraform-provider-%s/go.mod does not say its version as %s", provider, re)
	return string(m[1])
}

// providerConstraints returns each provider's version constraint in the
// terraform block's required_providers of file.
func providerConstraints(tb testing.TB, file string) map[string]string {
	tb.Helper()
	f, diags := hclparse.NewParser().ParseHCLFile(file)
	require.False(tb, diags.HasErrors(), diags.Error())
	out := map[string]string{}
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		if b.Type != "terraform" {
			continue
		}
		req := block(b, "required_providers")
		require.NotNil(tb, req, "%s: no required_providers", file)
		for name, attr := range req.Body.Attributes {
			v, diags := attr.Expr.Value(nil)
			require.False(tb, diags.HasErrors(), diags.Error())
			require.True(tb, v.Type().IsObjectType(), "%s: %s", file, name)
			c := v.GetAttr("version")
			require.Equal(tb, cty.String, c.Type(), "%s: %s.version", file, name)
			out[name] = c.AsString()
		}
	}
	return out
}
