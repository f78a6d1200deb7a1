package terraform_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestEnvironmentsGiveEveryClusterItsImage plans dev and prod with a GKE
// cluster of another project and one outside Google Cloud: one Docker
// repository, and a reader grant for each cluster's puller.
func TestEnvironmentsGiveEveryClusterItsImage(t *testing.T) {
	for _, env := range []string{"dev", "prod"} {
		t.Run(env, func(t *testing.T) {
			res := planEnvironment(t, env, `{
				"pc-eu" = {gke_project = "studio-game-eu", node_service_account = "gke-nodes@studio-game-eu.iam.gserviceaccount.com"},
				"eks-us" = {workload_identity_federation = {issuer_uri = "https://oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE"}}
			}`)
			var repos, pulls []plannedResource
			for _, r := range res {
				switch r.Type {
				case "google_artifact_registry_repository":
					repos = append(repos, r)
				case "google_artifact_registry_repository_iam_member":
					if r.Name == "pull" {
						pulls = append(pulls, r)
					}
				}
			}
			require.Len(t, repos, 1, "one repository for the images and the chart")
			assert.Equal(t, "DOCKER", repos[0].Values["format"])
			assert.Equal(t, "fleetcast", repos[0].Values["repository_id"])
			require.Len(t, pulls, 2, "a reader per cluster")
			members := map[string]bool{}
			for _, p := range pulls {
				assert.Equal(t, "roles/artifactregistry.reader", p.Values["role"])
				if m, ok := p.Values["member"].(string); ok {
					members[m] = true
				}
			}
			assert.True(t, members["serviceAccount:gke-nodes@studio-game-eu.iam.gserviceaccount.com"], "the GKE cluster's nodes pull: %v", members)
		})
	}
}

// cloudBuild is the part of a Cloud Build configuration the rules below
// read.
type cloudBuild struct {
	Steps []struct {
		ID         string   `json:"id"`
		Name       string   `json:"name"`
		Args       []string `json:"args"`
		Entrypoint string   `json:"entrypoint"`
		WaitFor    []string `json:"waitFor"`
	} `json:"steps"`
	Substitutions map[string]string `json:"substitutions"`
	Options       struct {
		Logging            string `json:"logging"`
		SubstitutionOption string `json:"substitutionOption"`
		MachineType        string `json:"machineType"`
	} `json:"options"`
	LogsBucket string `json:"logsBucket"`
	Timeout    string `json:"timeout"`
}

// Cloud Build's substitution syntax: $_NAME or ${_NAME} (user-defined
// ones start with an underscore, then capitals, digits or underscores);
// $$ escapes a dollar. Built-in ones ($PROJECT_ID, $COMMIT_SHA...) have no
// underscore.
var substitutionRef = regexp.MustCompile(`\$\$|\$\{(_[A-Z0-9_]+)\}|\$(_[A-Z0-9_]+)`)

// TestCloudBuildConfigurationKeepsCloudBuildsRules checks cloudbuild.yaml
// by the rules Cloud Build applies when a build is submitted
// (cloud.google.com/build/docs/configuring-builds/substitute-variable-values
// and .../build-config): without substitutionOption ALLOW_LOOSE, a
// substitution used but not declared, or declared but never used, fails
// the build; user substitutions are _ and capitals; a build run as a
// user-specified service account (make cloudbuild's --service-account)
// must log to Cloud Logging only or to a logs bucket. It also checks what
// it references: the Dockerfiles, the images Terraform's repository and
// the chart name, and the substitutions make cloudbuild passes.
func TestCloudBuildConfigurationKeepsCloudBuildsRules(t *testing.T) {
	raw := mustRead(t, "../cloudbuild.yaml")
	var cb cloudBuild
	require.NoError(t, yaml.UnmarshalStrict(raw, &cb), "keys Cloud Build does not know fail the submission")
	assert.NotEqual(t, "ALLOW_LOOSE", cb.Options.SubstitutionOption, "the strict rules below are Cloud Build's default")
	for key := range cb.Substitutions {
		assert.Regexp(t, `^_[A-Z0-9_]+$`, key, "a user-defined substitution")
	}
	used := map[string]bool{}
	ids := map[string]bool{}
	images := map[string]string{}
	for _, s := range cb.Steps {
		require.NotEmpty(t, s.ID)
		for _, w := range s.WaitFor {
			assert.True(t, ids[w] || w == "-", "%s waits for %s, which no earlier step is", s.ID, w)
		}
		ids[s.ID] = true
		text := strings.Join(append([]string{s.Name, s.Entrypoint}, s.Args...), " ")
		for _, m := range substitutionRef.FindAllStringSubmatch(text, -1) {
			if name := m[1] + m[2]; name != "" {
				used[name] = true
				assert.Contains(t, cb.Substitutions, name, "step %s uses %s, which substitutions does not declare", s.ID, name)
			}
		}
		for _, m := range regexp.MustCompile(`-f (\S+) .*-t \$\{_REGISTRY\}/([a-z0-9-]+):\$\{_VERSION\}`).FindAllStringSubmatch(strings.ReplaceAll(text, "\\\n", " "), -1) {
			images[m[2]] = m[1]
		}
	}
	for key := range cb.Substitutions {
		assert.True(t, used[key], "%s is declared and never used: Cloud Build refuses the build", key)
	}
	assert.Contains(t, []string{"CLOUD_LOGGING_ONLY", "NONE"}, cb.Options.Logging, "a build with its own service account needs a logs bucket or Cloud Logging only")

	assert.Equal(t, map[string]string{
		"fleetcast-publisher": "cmd/fleetcast-publisher/Dockerfile",
		"fleetcast-query":     "cmd/fleetcast-query/Dockerfile",
		"fleetcast-ingest":    "cmd/fleetcast-ingest/Dockerfile",
		"fleetcast-allocator": "cmd/fleetcast-allocator/Dockerfile",
	}, images, "each image from its program's Dockerfile")
	for _, dockerfile := range images {
		_, err := os.Stat(filepath.Join("..", dockerfile))
		assert.NoError(t, err)
	}
	// The publisher's image is the one Terraform's publisher_image output
	// names under its registry output, which the chart's values carry.
	outputs := string(mustRead(t, "modules/fleetcast/registry.tf"))
	assert.Contains(t, outputs, `publisher_image = "${local.registry}/fleetcast-publisher"`)

	// make cloudbuild passes exactly the declared substitutions.
	makefile := string(mustRead(t, "../Makefile"))
	m := regexp.MustCompile(`(?m)--substitutions (.+) \.$`).FindStringSubmatch(makefile)
	require.NotNil(t, m, "make cloudbuild's gcloud builds submit --substitutions")
	var passed []string
	for _, kv := range strings.Split(m[1], ",") {
		passed = append(passed, strings.SplitN(kv, "=", 2)[0])
	}
	var declared []string
	for key := range cb.Substitutions {
		declared = append(declared, key)
	}
	slices.Sort(passed)
	slices.Sort(declared)
	assert.Equal(t, declared, passed)
	assert.Contains(t, makefile, "--config cloudbuild.yaml")

	// What gcloud builds submit uploads is Docker's build context.
	ignore := string(mustRead(t, "../.gcloudignore"))
	assert.Contains(t, ignore, "#!include:.dockerignore")
}
