package fleetmetrics_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"

	"github.com/fleetcast/fleetcast/fleetapi/fleetmetrics"
)

func TestLabelNamesArePrometheusLabels(t *testing.T) {
	for key, want := range map[string]string{
		"platform":                  "label_platform",
		"app.kubernetes.io/version": "label_app_kubernetes_io_version",
		"agones.dev/sdk-gs-session": "label_agones_dev_sdk_gs_session",
		"Region_1":                  "label_Region_1",
	} {
		got := fleetmetrics.LabelName(key)
		assert.Equal(t, want, got, key)
		assert.True(t, model.LegacyValidation.IsValidLabelName(got), "%s is a label name every Prometheus accepts", got)
	}
	for _, name := range fleetmetrics.Names() {
		assert.True(t, model.LegacyValidation.IsValidMetricName(name), name)
	}
}

func TestOptionsNameEveryBadField(t *testing.T) {
	assert.NoError(t, fleetmetrics.Options{}.Validate(), "the zero value is the defaults")
	assert.NoError(t, fleetmetrics.Options{Labels: []string{"platform", "app.kubernetes.io/version"}, MaxSeries: 1}.Validate())
	var eleven []string
	for i := range fleetmetrics.MaxLabels + 1 {
		eleven = append(eleven, fmt.Sprintf("k%d", i))
	}
	err := fleetmetrics.Options{Labels: append(eleven, "no spaces", "a.b", "a_b"), MaxSeries: -1}.Validate()
	for _, want := range []string{"MaxSeries -1", "Labels: 14 keys, at most 10", `"no spaces" is not a label key`, `"a.b" and "a_b" are both label_a_b`} {
		assert.ErrorContains(t, err, want)
	}
}
