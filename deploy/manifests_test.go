package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The example manifests (compose.yaml, kubernetes/*.yaml) are checked against the
// binary itself: `idem <command> --help` of a fresh build lists the flags and the
// environment variables each command reads, and which flag's address serves
// /healthz and /metrics. A manifest that names a flag the command lacks, probes
// another port than the one serving /healthz, or puts a secret inline fails here.

// command is what `idem <name> --help` says.
type command struct {
	flags map[string]flagInfo
	env   map[string]string // IDEM_… variable → the flag it sets
}

type flagInfo struct {
	isBool bool
	usage  string
}

var (
	idemOnce sync.Once
	idemBin  string
	idemErr  error
	helpMu   sync.Mutex
	helps    = map[string]*command{}

	flagLineRE = regexp.MustCompile(`^  -([a-z0-9-]+)(?: (\S+))?$`)
	envRE      = regexp.MustCompile(`\$(IDEM_[A-Z0-9_]+)`)
)

// TestMain removes the binary idemBinary built.
func TestMain(m *testing.M) {
	code := m.Run()
	if idemBin != "" {
		os.RemoveAll(filepath.Dir(idemBin))
	}
	os.Exit(code)
}

// idemBinary builds cmd/idem once for the package's tests.
func idemBinary(t *testing.T) string {
	t.Helper()
	idemOnce.Do(func() {
		dir, err := os.MkdirTemp("", "idem-deploy-test")
		if err != nil {
			idemErr = err
			return
		}
		idemBin = filepath.Join(dir, "idem")
		out, err := exec.Command("go", "build", "-o", idemBin, "../cmd/idem").CombinedOutput()
		if err != nil {
			idemErr = errors.New("go build ../cmd/idem: " + err.Error() + "\n" + string(out))
		}
	})
	if idemErr != nil {
		t.Fatal(idemErr)
	}
	return idemBin
}

// help parses `idem name --help`: flags (with whether each is boolean, from
// flag.PrintDefaults' format) and environment variables. serve reads every flag
// from IDEM_<FLAG>; the other commands name theirs as [$IDEM_…] in the usage.
func help(t *testing.T, name string) *command {
	t.Helper()
	helpMu.Lock()
	defer helpMu.Unlock()
	if c, ok := helps[name]; ok {
		return c
	}
	var out bytes.Buffer
	cmd := exec.Command(idemBinary(t), name, "--help")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("idem %s --help: %v\n%s", name, err, out.String())
	}
	c := &command{flags: map[string]flagInfo{}, env: map[string]string{}}
	var last string
	for _, line := range strings.Split(out.String(), "\n") {
		if m := flagLineRE.FindStringSubmatch(line); m != nil {
			last = m[1]
			c.flags[last] = flagInfo{isBool: m[2] == ""}
			if name == "serve" {
				c.env["IDEM_"+strings.ToUpper(strings.ReplaceAll(last, "-", "_"))] = last
			}
			continue
		}
		if last != "" && strings.HasPrefix(line, "    \t") {
			f := c.flags[last]
			f.usage += strings.TrimSpace(line) + " "
			c.flags[last] = f
			for _, m := range envRE.FindAllStringSubmatch(line, -1) {
				c.env[m[1]] = last
			}
		}
	}
	if len(c.flags) == 0 {
		t.Fatalf("idem %s --help lists no flags:\n%s", name, out.String())
	}
	helps[name] = c
	return c
}

// invocation is one container's idem command line, checked against its help.
type invocation struct {
	command string
	flags   map[string]string // flag → value ("true" for a bare boolean)
}

// parseArgs reads an idem command line against the command's help: it returns the
// problems (a flag the command does not have, a stray argument, a missing value).
func parseArgs(t *testing.T, args []string) (invocation, []string) {
	t.Helper()
	if len(args) == 0 {
		return invocation{}, []string{"no idem command in the arguments"}
	}
	inv := invocation{command: args[0], flags: map[string]string{}}
	c := help(t, inv.command)
	rest := args[1:]
	if inv.command == "migrate" && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		rest = rest[1:] // the action: up, down, status, print
	}
	var problems []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if !strings.HasPrefix(a, "-") {
			problems = append(problems, fmt.Sprintf("idem %s: unexpected argument %q", inv.command, a))
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f, ok := c.flags[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("idem %s has no flag --%s (see idem %s --help)", inv.command, name, inv.command))
			continue
		}
		switch {
		case hasValue:
		case f.isBool:
			value = "true"
		case i+1 < len(rest):
			i++
			value = rest[i]
		default:
			problems = append(problems, fmt.Sprintf("--%s needs a value", name))
		}
		inv.flags[name] = value
	}
	return inv, problems
}

// secretFlags carry credentials: URLs with passwords, tokens, HMAC secrets. They must
// come from a Secret (Kubernetes) or the environment (compose), never a literal.
var secretFlags = []string{"store", "db", "sink", "admin-token", "token", "read-token", "webhook-secret"}

// healthFlag returns the flag whose address serves /healthz and /metrics, per the
// command's own help text, and the port it listens on in inv.
func healthFlag(t *testing.T, where string, inv invocation) (string, int) {
	t.Helper()
	c := help(t, inv.command)
	for name, f := range c.flags {
		if strings.Contains(f.usage, "/healthz") && strings.Contains(f.usage, "/metrics") && strings.Contains(name, "listen") {
			addr, ok := inv.flags[name]
			if !ok {
				t.Errorf("%s: idem %s without --%s listens on loopback only: probes and scrapes cannot reach it", where, inv.command, name)
				return name, 0
			}
			_, port, _ := strings.Cut(addr, ":")
			p, err := strconv.Atoi(port)
			if err != nil {
				t.Errorf("%s: --%s=%q: no port", where, name, addr)
			}
			return name, p
		}
	}
	t.Fatalf("idem %s --help names no flag serving /healthz and /metrics", inv.command)
	return "", 0
}

func readYAML(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			return docs
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out, err := yaml.Marshal(&n)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, out)
	}
}

// strict decodes a document into v, refusing fields v does not name: a typo such
// as readinesProbe is an error, not a probe that silently is not there.
func strict(t *testing.T, where string, doc []byte, v any) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
}

// The Kubernetes shapes the manifests use; strict decoding refuses any other field.
type (
	k8sObject struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name        string            `yaml:"name"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"metadata"`
		Spec yaml.Node `yaml:"spec"`
	}
	deploymentSpec struct {
		Replicas int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	}
	podSpec struct {
		SecurityContext struct {
			RunAsNonRoot   bool              `yaml:"runAsNonRoot"`
			RunAsUser      int               `yaml:"runAsUser"`
			RunAsGroup     int               `yaml:"runAsGroup"`
			SeccompProfile map[string]string `yaml:"seccompProfile"`
		} `yaml:"securityContext"`
		InitContainers []container `yaml:"initContainers"`
		Containers     []container `yaml:"containers"`
		Volumes        []struct {
			Name     string    `yaml:"name"`
			EmptyDir yaml.Node `yaml:"emptyDir"`
		} `yaml:"volumes"`
	}
	container struct {
		Name  string   `yaml:"name"`
		Image string   `yaml:"image"`
		Args  []string `yaml:"args"`
		Env   []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom struct {
				SecretKeyRef struct {
					Name string `yaml:"name"`
					Key  string `yaml:"key"`
				} `yaml:"secretKeyRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		ReadinessProbe *probe     `yaml:"readinessProbe"`
		LivenessProbe  *probe     `yaml:"livenessProbe"`
		Resources      yaml.Node  `yaml:"resources"`
		SecurityCtx    securityCx `yaml:"securityContext"`
		VolumeMounts   []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port int    `yaml:"port"`
		} `yaml:"httpGet"`
		PeriodSeconds    int `yaml:"periodSeconds"`
		FailureThreshold int `yaml:"failureThreshold"`
	}
	securityCx struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	}
	serviceSpec struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
	}
)

// checkEnv checks a container's environment: every IDEM_ variable is one the
// command reads, and a variable of a secret flag comes from a Secret.
func checkEnv(t *testing.T, where string, inv invocation, name, value string, fromSecret bool) {
	t.Helper()
	c := help(t, inv.command)
	flag, ok := c.env[name]
	if !ok {
		t.Errorf("%s: idem %s reads no $%s (see idem %s --help)", where, inv.command, name, inv.command)
		return
	}
	if slices.Contains(secretFlags, flag) && !fromSecret {
		t.Errorf("%s: $%s (--%s) holds a credential: take it from a Secret, not %q", where, name, flag, value)
	}
}

func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("kubernetes/*.yaml")
	if len(files) == 0 {
		t.Fatal("no kubernetes/*.yaml")
	}
	daemons := map[string]bool{}
	for _, file := range files {
		var deployments []deploymentSpec
		var services []serviceSpec
		for i, doc := range readYAML(t, file) {
			where := fmt.Sprintf("%s#%d", file, i)
			var obj k8sObject
			strict(t, where, doc, &obj)
			spec, _ := yaml.Marshal(&obj.Spec)
			switch obj.Kind {
			case "Deployment":
				var d deploymentSpec
				strict(t, where, spec, &d)
				deployments = append(deployments, d)
			case "Service":
				var s serviceSpec
				strict(t, where, spec, &s)
				services = append(services, s)
			default:
				t.Errorf("%s: kind %q: the test checks Deployments and Services only", where, obj.Kind)
			}
		}
		for _, d := range deployments {
			daemons[checkDeployment(t, file, d, services)] = true
		}
	}
	for _, want := range []string{"serve", "relay"} {
		if !daemons[want] {
			t.Errorf("no Deployment runs idem %s", want)
		}
	}
}

// checkDeployment checks one Deployment against the binary and returns the idem
// command its main container runs.
func checkDeployment(t *testing.T, file string, d deploymentSpec, services []serviceSpec) string {
	t.Helper()
	pod := d.Template.Spec
	sc := pod.SecurityContext
	if !sc.RunAsNonRoot || sc.RunAsUser == 0 {
		t.Errorf("%s: the pod must run as a non-root user (runAsNonRoot, runAsUser ≠ 0)", file)
	}
	tmpVolume := ""
	for _, v := range pod.Volumes {
		if v.EmptyDir.Kind != 0 {
			tmpVolume = v.Name
		}
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: want one container, got %d", file, len(pod.Containers))
	}
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		where := file + ": container " + c.Name
		if !c.SecurityCtx.ReadOnlyRootFilesystem || c.SecurityCtx.AllowPrivilegeEscalation == nil || *c.SecurityCtx.AllowPrivilegeEscalation {
			t.Errorf("%s: want readOnlyRootFilesystem: true and allowPrivilegeEscalation: false", where)
		}
		inv, problems := parseArgs(t, c.Args)
		for _, p := range problems {
			t.Errorf("%s: %s", where, p)
		}
		fromEnv := map[string]bool{}
		for _, e := range c.Env {
			fromEnv[e.Name] = true
			if slices.ContainsFunc(c.Args, func(a string) bool { return strings.Contains(a, "$("+e.Name+")") }) {
				continue // only expanded into the arguments by Kubernetes, which are checked below
			}
			checkEnv(t, where, inv, e.Name, e.Value, e.ValueFrom.SecretKeyRef.Name != "" && e.ValueFrom.SecretKeyRef.Key != "")
		}
		for _, f := range secretFlags {
			// A credential on the command line only as $(VAR) of a Secret-backed variable.
			if v, ok := inv.flags[f]; ok {
				if m := regexp.MustCompile(`^\$\(([A-Z0-9_]+)\)$`).FindStringSubmatch(v); m == nil || !fromEnv[m[1]] {
					t.Errorf("%s: --%s=%q inline: take it from a Secret", where, f, v)
				}
			}
		}
	}
	c := pod.Containers[0]
	where := file + ": container " + c.Name
	inv, _ := parseArgs(t, c.Args)
	if !slices.ContainsFunc(c.VolumeMounts, func(m struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	}) bool {
		return m.MountPath == "/tmp" && m.Name == tmpVolume && tmpVolume != ""
	}) {
		t.Errorf("%s: the read-only root needs an emptyDir at /tmp", where)
	}
	flag, port := healthFlag(t, where, inv)
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if !slices.Contains(slices.Collect(mapsValues(ports)), port) {
		t.Errorf("%s: no containerPort %d (--%s)", where, port, flag)
	}
	for name, p := range map[string]*probe{"readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
		if p == nil {
			t.Errorf("%s: no %s", where, name)
			continue
		}
		if p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port != port {
			t.Errorf("%s: %s on %s:%d, want /healthz on %d (--%s)", where, name, p.HTTPGet.Path, p.HTTPGet.Port, port, flag)
		}
	}
	ann := d.Template.Metadata.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" || ann["prometheus.io/port"] != strconv.Itoa(port) {
		t.Errorf("%s: scrape annotations %v, want /metrics on %d (--%s)", where, ann, port, flag)
	}
	for k, v := range d.Selector.MatchLabels {
		if d.Template.Metadata.Labels[k] != v {
			t.Errorf("%s: the selector's %s=%s is not on the pod template", where, k, v)
		}
	}
	// Every Service in the file that selects this pod targets one of its named ports.
	for _, s := range services {
		selects := len(s.Selector) > 0
		for k, v := range s.Selector {
			selects = selects && d.Template.Metadata.Labels[k] == v
		}
		if !selects {
			continue
		}
		for _, p := range s.Ports {
			if _, ok := ports[p.TargetPort]; !ok {
				t.Errorf("%s: Service port %s targets %q, which the container does not name", where, p.Name, p.TargetPort)
			}
		}
	}
	return inv.command
}

func mapsValues(m map[string]int) func(func(int) bool) {
	return func(yield func(int) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// compose.yaml: every service running the idem image is checked as the Kubernetes
// ones are (flags, variables, the health port published, non-root, read-only root
// with a tmpfs /tmp). Credentials come from ${…} interpolation only.
func TestComposeManifest(t *testing.T) {
	t.Parallel()
	type service struct {
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		User        string            `yaml:"user"`
		ReadOnly    bool              `yaml:"read_only"`
		Tmpfs       []string          `yaml:"tmpfs"`
		DependsOn   yaml.Node         `yaml:"depends_on"`
		Restart     string            `yaml:"restart"`
	}
	var file struct {
		Services map[string]service `yaml:"services"`
	}
	docs := readYAML(t, "compose.yaml")
	if len(docs) != 1 {
		t.Fatalf("compose.yaml: %d documents, want 1", len(docs))
	}
	strict(t, "compose.yaml", docs[0], &file)
	interpolated := regexp.MustCompile(`\$\{[A-Z0-9_]+(:?[-?][^}]*)?\}`)
	literalSecret := func(v string) bool {
		// A credential is written only as ${VAR…}: take the interpolations out and
		// look for what remains of a password or a token.
		rest := interpolated.ReplaceAllString(v, "")
		return regexp.MustCompile(`://[^/@:]*:[^/@]+@`).MatchString(rest) || (!strings.Contains(v, "${") && !strings.Contains(v, "://"))
	}
	daemons := map[string]bool{}
	for name, s := range file.Services {
		if !strings.Contains(s.Image, "idem") {
			continue
		}
		where := "compose.yaml: " + name
		inv, problems := parseArgs(t, s.Command)
		for _, p := range problems {
			t.Errorf("%s: %s", where, p)
		}
		daemons[inv.command] = true
		if s.User == "" || strings.HasPrefix(s.User, "0") || s.User == "root" || !s.ReadOnly {
			t.Errorf("%s: want a non-root user and read_only: true", where)
		}
		for k, v := range s.Environment {
			checkEnv(t, where, inv, k, v, true)
			if c := help(t, inv.command); slices.Contains(secretFlags, c.env[k]) && literalSecret(v) {
				t.Errorf("%s: $%s = %q: a credential written into the file; use ${…} from the environment", where, k, v)
			}
		}
		for _, f := range secretFlags {
			if v, ok := inv.flags[f]; ok && literalSecret(v) {
				t.Errorf("%s: --%s=%q: a credential written into the file; use ${…} from the environment", where, f, v)
			}
		}
		if inv.command == "migrate" {
			continue
		}
		if !slices.Contains(s.Tmpfs, "/tmp") {
			t.Errorf("%s: the read-only root needs tmpfs: [/tmp]", where)
		}
		flag, port := healthFlag(t, where, inv)
		published := false
		for _, p := range s.Ports {
			parts := strings.Split(p, ":")
			published = published || parts[len(parts)-1] == strconv.Itoa(port)
			if len(parts) < 3 || parts[0] != "127.0.0.1" {
				t.Errorf("%s: port %q published on every interface; bind 127.0.0.1", where, p)
			}
		}
		if !published {
			t.Errorf("%s: /healthz and /metrics (--%s, port %d) not published", where, flag, port)
		}
	}
	for _, want := range []string{"serve", "relay"} {
		if !daemons[want] {
			t.Errorf("compose.yaml: no service runs idem %s", want)
		}
	}
}

// The checks fail on what they exist to catch: a flag the binary does not have, a
// probe on the wrong port, a credential inline.
func TestManifestChecksFail(t *testing.T) {
	t.Parallel()
	if _, problems := parseArgs(t, []string{"relay", "--listen=:9464", "--no-such-flag=1"}); len(problems) != 1 ||
		!strings.Contains(problems[0], "--no-such-flag") {
		t.Errorf("parseArgs(relay --no-such-flag) = %q, want the unknown flag named", problems)
	}
	if _, problems := parseArgs(t, []string{"serve", "--admin-listen", ":9465", "--metrics=:1"}); len(problems) != 1 {
		t.Errorf("parseArgs(serve --metrics) = %q, want one problem", problems)
	}
	inv, problems := parseArgs(t, []string{"serve", "--require-key", "--admin-listen", ":9465"})
	if len(problems) != 0 || inv.flags["require-key"] != "true" || inv.flags["admin-listen"] != ":9465" {
		t.Errorf("parseArgs(serve --require-key --admin-listen :9465) = %+v, %q", inv, problems)
	}
	if flag, port := healthFlag(t, "probe", inv); flag != "admin-listen" || port != 9465 {
		t.Errorf("healthFlag(serve) = --%s %d, want --admin-listen 9465", flag, port)
	}
	if c := help(t, "relay"); c.env["IDEM_DB"] != "db" || c.env["IDEM_SINK"] != "sink" {
		t.Errorf("relay's variables %v, want IDEM_DB and IDEM_SINK", c.env)
	}
}
