package cli

import (
	"flag"
	"strings"
)

// FlagProblem words a flag.FlagSet's parse error for Parse: an unknown flag is
// named as typed on a command line (--name) with the closest flag of fs when one
// is near; the flag package's other errors (a bad value, a missing argument)
// already name the flag and are kept as they are.
func FlagProblem(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	name, ok := strings.CutPrefix(msg, "flag provided but not defined: -")
	if !ok {
		return msg
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return "unknown flag --" + name + DidYouMean(name, names, "--")
}

// DidYouMean returns "; did you mean <prefix>NAME?" for the name among names
// nearest to typed, or "" when none is near: at most two edits apart (one for a
// name of three letters or fewer), or typed a prefix of exactly one name.
func DidYouMean(typed string, names []string, prefix string) string {
	best, bestDist, prefixed := "", 0, []string{}
	for _, n := range names {
		if d := editDistance(typed, n); best == "" || d < bestDist {
			best, bestDist = n, d
		}
		if len(typed) >= 2 && strings.HasPrefix(n, typed) {
			prefixed = append(prefixed, n)
		}
	}
	limit := 2
	if len(typed) <= 3 {
		limit = 1
	}
	switch {
	case best != "" && bestDist <= limit:
	case len(prefixed) == 1:
		best = prefixed[0]
	default:
		return ""
	}
	return "; did you mean " + prefix + best + "?"
}

// editDistance is the Levenshtein distance between a and b, in bytes (flag and
// command names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
