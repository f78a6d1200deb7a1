module github.com/fleetcast/fleetcast

go 1.26.0

require (
	github.com/linkedin/goavro/v2 v2.15.0
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/golang/snappy v0.0.4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/text v0.43.0 // indirect
)
