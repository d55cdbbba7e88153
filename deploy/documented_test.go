package deploy

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const (
	observabilityPage = "../docs/observability.md"
	metricsBegin      = "<!-- metrics:begin (written by go test ./deploy with IDEM_UPDATE_DOCS=1) -->"
	metricsEnd        = "<!-- metrics:end -->"
)

var (
	helpRE   = regexp.MustCompile(`help: "((?:\\.|[^"\\])*)"`)
	labelsRE = regexp.MustCompile(`(constLabels|variableLabels): \{([^}]*)\}`)
	labelRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)(?:="[^"]*")?`)
)

// metricsTable is the reference table of every metric idem exports, made from the
// descriptors themselves: the name, its type, its labels and its help text.
func metricsTable(r *recorder) string {
	names := make([]string, 0, len(r.names))
	for n := range r.names {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString("| metric | type | labels | what it says |\n|---|---|---|---|\n")
	for _, n := range names {
		d := r.descs[n]
		kind := "gauge"
		switch {
		case r.histograms[n]:
			kind = "histogram"
		case strings.HasSuffix(n, "_total"):
			kind = "counter"
		}
		var labels []string
		for _, m := range labelsRE.FindAllStringSubmatch(d, -1) {
			for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
				labels = append(labels, "`"+l[1]+"`")
			}
		}
		help := ""
		if m := helpRE.FindStringSubmatch(d); m != nil {
			help = strings.ReplaceAll(m[1], "|", `\|`)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", n, kind, strings.Join(labels, ", "), help)
	}
	return b.String()
}

// TestMetricsReference: docs/observability.md lists every metric idem exports, as
// its descriptor says it (type, labels, help), so a new or renamed metric cannot
// land undocumented. IDEM_UPDATE_DOCS=1 writes the table into the page.
func TestMetricsReference(t *testing.T) {
	t.Parallel()
	want := metricsTable(registered(t))
	page, err := os.ReadFile(observabilityPage)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(page), metricsBegin+"\n")
	_, after, ok2 := strings.Cut(rest, metricsEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks the lines %q and %q around the metrics table", observabilityPage, metricsBegin, metricsEnd)
	}
	if got, _, _ := strings.Cut(rest, metricsEnd); got == want {
		return
	}
	if os.Getenv("IDEM_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(observabilityPage, []byte(before+metricsBegin+"\n"+want+metricsEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's metrics table is not what idem exports: run IDEM_UPDATE_DOCS=1 go test ./deploy -run TestMetricsReference and commit the page", observabilityPage)
}
