// Package sqsrules holds SQS's rules for what a message may carry, as AWS
// documents them, once: idemsqs checks them before it sends (so bad input is an
// *idem.InputError, not a half-sent batch) and sqsfake enforces them as SQS does.
package sqsrules

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// SQS's limits on names and ids.
const (
	MaxAttributeName   = 256 // characters of a message attribute name
	MaxGroupOrDedupLen = 128 // characters of a MessageGroupId or MessageDeduplicationId
)

// ValidText returns the index of the first character SQS refuses in a body or a
// String attribute (it accepts XML's characters: tab, line feed, carriage return,
// U+0020 to U+D7FF, U+E000 to U+FFFD, U+10000 up), or -1.
func ValidText(s string) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 || r == 0xFFFE || r == 0xFFFF {
			return i
		}
		i += n
	}
	return -1
}

// AttributeName applies SQS's rules for message attribute names: letters, digits,
// '-', '_' and '.', not starting or ending with '.', no "..", not starting with
// "AWS." or "Amazon." in any case, at most 256 characters.
func AttributeName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("is empty")
	case len(name) > MaxAttributeName:
		return fmt.Errorf("is longer than %d characters (got %d)", MaxAttributeName, len(name))
	case strings.HasPrefix(name, ".") || strings.HasSuffix(name, "."):
		return fmt.Errorf("starts or ends with a period")
	case strings.Contains(name, ".."):
		return fmt.Errorf("has two periods in a row")
	case hasPrefixFold(name, "aws.") || hasPrefixFold(name, "amazon."):
		return fmt.Errorf("starts with a prefix AWS reserves (AWS. or Amazon.)")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !IsAlnum(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("has %q, outside letters, digits, '-', '_' and '.'", rune(c))
		}
	}
	return nil
}

// GroupOrDedupID applies SQS's rules for a MessageGroupId or
// MessageDeduplicationId: 1 to 128 ASCII letters, digits or punctuation.
func GroupOrDedupID(id string) error {
	if id == "" || len(id) > MaxGroupOrDedupLen {
		return fmt.Errorf("is not 1 to %d characters long (got %d)", MaxGroupOrDedupLen, len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("has %q, outside ASCII letters, digits and punctuation", rune(c))
		}
	}
	return nil
}

// IsAlnum reports whether c is an ASCII letter or digit.
func IsAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
