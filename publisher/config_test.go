package publisher

import (
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
	err := c.Validate()
	assert.ElementsMatch(t, []string{"Cluster", "ClusterLabels", "LabelSelector", "SnapshotInterval", "RenewDeadline", "RefreshInterval", "LeaseName"}, fields(FieldErrors(err)))
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
