package publisher

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDefaultConfigNeedsOnlyWhatIsTheInstances(t *testing.T) {
	c := DefaultConfig()
	assert.ElementsMatch(t, []string{"Cluster", "Project", "ID"}, fields(FieldErrors(c.Validate())))
	c.Cluster, c.Project, c.ID = "pc", "p", "pod"
	require.NoError(t, c.Validate())
	assert.Equal(t, "fleet-events-pc", c.TopicID())
}

func TestValidateNamesEveryField(t *testing.T) {
	c := DefaultConfig()
	c.Cluster, c.Project, c.ID = "PC_1", "p", "pod"
	c.ClusterLabels = map[string]string{"bad key!": "v"}
	c.LabelSelector = "a in (b"
	c.SnapshotInterval = 0
	c.RenewDeadline = 20 * time.Second
	c.RefreshInterval = -time.Second
	c.LeaseName = ""
	c.TraceSampleRatio = math.NaN()
	err := c.Validate()
	assert.ElementsMatch(t, []string{"Cluster", "ClusterLabels", "LabelSelector", "SnapshotInterval", "RenewDeadline", "RefreshInterval", "LeaseName", "TraceSampleRatio"}, fields(FieldErrors(err)))
	assert.Contains(t, err.Error(), "RenewDeadline: 20s must be shorter than LeaseDuration 15s")
}

func TestNewRefusesAnInvalidConfig(t *testing.T) {
	_, err := New(DefaultConfig(), Deps{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Cluster: is required")
}

func fields(errs []*FieldError) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Field)
	}
	return out
}

// TestInformationServiceSettings: plaintext only when asked for, TLS
// files only with an address, and a publisher that does not publish must
// serve (and then needs no project).
func TestInformationServiceSettings(t *testing.T) {
	base := DefaultConfig()
	base.Cluster, base.Project, base.ID = "pc", "p", "pod"
	for _, tt := range []struct {
		what string
		set  func(*Config)
		want []string
	}{
		{"TLS", func(c *Config) { c.GRPCAddr, c.TLSCertFile, c.TLSPrivateKeyFile = ":8443", "c", "k" }, nil},
		{"mutual TLS", func(c *Config) {
			c.GRPCAddr, c.TLSCertFile, c.TLSPrivateKeyFile, c.ClientCAFile = ":8443", "c", "k", "ca"
		}, nil},
		{"plaintext asked for", func(c *Config) { c.GRPCAddr, c.GRPCPlaintext = ":8443", true }, nil},
		{"plaintext not asked for", func(c *Config) { c.GRPCAddr = ":8443" }, []string{"TLSCertFile", "TLSPrivateKeyFile"}},
		{"plaintext and TLS", func(c *Config) { c.GRPCAddr, c.GRPCPlaintext, c.TLSCertFile = ":8443", true, "c" }, []string{"GRPCPlaintext"}},
		{"TLS files, no address", func(c *Config) { c.TLSCertFile, c.ClientCAFile = "c", "ca" }, []string{"TLSCertFile", "ClientCAFile"}},
		{"serving only, no project", func(c *Config) { c.Publish, c.Project, c.GRPCAddr, c.GRPCPlaintext = false, "", ":8443", true }, nil},
		{"neither publishing nor serving", func(c *Config) { c.Publish, c.Project = false, "" }, []string{"Publish"}},
	} {
		c := base
		tt.set(&c)
		assert.ElementsMatch(t, tt.want, fields(FieldErrors(c.Validate())), tt.what)
	}
}
