// An example of its own module: it builds against fleetcast's public
// packages only (the replace points at this checkout; a studio names a
// released version instead) and Agones' allocation API generated here.
module github.com/fleetcast/fleetcast/examples/allocation

go 1.26.0

require (
	github.com/fleetcast/fleetcast v0.0.0
	github.com/stretchr/testify v1.12.1
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
	k8s.io/apimachinery v0.37.2
)

require (
	github.com/go-logr/logr v1.4.4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261104224025-d1e00e9f33ab // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/utils v0.0.0-20261023123148-ca04ba58ecab // indirect
)

replace github.com/fleetcast/fleetcast => ../..
