package sqsfake

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// DedupWindow is how long SQS remembers a MessageDeduplicationId: fixed, from the
// first send of the id.
const DedupWindow = 5 * time.Minute

// SQS's limits, as AWS documents them.
const (
	MaxAttributes      = 10 // message attributes per message
	MaxAttributeName   = 256
	MaxBatchEntries    = 10
	MaxGroupOrDedupLen = 128
	MaxVisibility      = 12 * 60 * 60 // seconds
	MaxWaitSeconds     = 20
	DefaultMaxSize     = 256 << 10 // MaximumMessageSize when a queue does not set it
	MaxMessageSize     = 1 << 20   // the largest MaximumMessageSize
	MinMessageSize     = 1 << 10   // the smallest MaximumMessageSize
	maxQueueName       = 80
	maxBatchEntryID    = 80
)

// validText reports the first character SQS refuses in a message body or a String
// attribute value (XML's characters: tab, newline, carriage return, U+0020 to
// U+D7FF, U+E000 to U+FFFD, U+10000 to U+10FFFF), or -1 when there is none.
func validText(s string) int {
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			if _, n := utf8.DecodeRuneInString(s[i:]); n <= 1 {
				return i // invalid UTF-8
			}
		case r == '\t' || r == '\n' || r == '\r':
		case r < 0x20, r >= 0xD800 && r <= 0xDFFF, r == 0xFFFE || r == 0xFFFF:
			return i
		}
	}
	return -1
}

// validAttributeName checks a message attribute name: letters, digits, '-', '_' and
// '.', not starting or ending with '.', no "..", not starting with "AWS." or
// "Amazon." in any case, at most 256 characters.
func validAttributeName(name string) error {
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
		if c := name[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("has %q, outside letters, digits, '-', '_' and '.'", rune(c))
		}
	}
	return nil
}

// validGroupOrDedupID checks a MessageGroupId or MessageDeduplicationId: 1 to 128
// characters, letters, digits and ASCII punctuation.
func validGroupOrDedupID(id string) error {
	if id == "" || len(id) > MaxGroupOrDedupLen {
		return fmt.Errorf("must be 1 to %d characters (got %d)", MaxGroupOrDedupLen, len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !isAlnum(c) && !isPunct(c) {
			return fmt.Errorf("has %q, outside letters, digits and punctuation", rune(c))
		}
	}
	return nil
}

func validQueueName(name string) error {
	base := strings.TrimSuffix(name, ".fifo")
	if name == "" || len(name) > maxQueueName {
		return fmt.Errorf("queue names are 1 to %d characters (got %d)", maxQueueName, len(name))
	}
	for i := 0; i < len(base); i++ {
		if c := base[i]; !isAlnum(c) && c != '-' && c != '_' {
			return fmt.Errorf("queue names have letters, digits, '-' and '_' (and the suffix .fifo), not %q", rune(c))
		}
	}
	return nil
}

func validBatchEntryID(id string) bool {
	if id == "" || len(id) > maxBatchEntryID {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !isAlnum(c) && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isPunct(c byte) bool {
	return c >= '!' && c <= '/' || c >= ':' && c <= '@' || c >= '[' && c <= '`' || c >= '{' && c <= '~'
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// attrValue is a message attribute.
type attrValue struct {
	DataType         string   `json:"DataType"`
	StringValue      *string  `json:"StringValue,omitempty"`
	BinaryValue      []byte   `json:"BinaryValue,omitempty"`
	StringListValues []string `json:"StringListValues,omitempty"`
	BinaryListValues [][]byte `json:"BinaryListValues,omitempty"`
}

// checkAttributes applies SQS's rules to a message's attributes and returns the
// bytes they count towards the message size.
func checkAttributes(attrs map[string]attrValue) (int, *apiError) {
	if len(attrs) > MaxAttributes {
		return 0, errInvalid("Number of message attributes [%d] exceeds the allowed maximum [%d].", len(attrs), MaxAttributes)
	}
	size := 0
	for name, v := range attrs {
		if err := validAttributeName(name); err != nil {
			return 0, &apiError{400, "InvalidAttributeName", "InvalidAttributeName", fmt.Sprintf("Message attribute name %q %v.", name, err)}
		}
		base, _, _ := strings.Cut(v.DataType, ".")
		switch base {
		case "String", "Number":
			if v.StringValue == nil || *v.StringValue == "" {
				return 0, &apiError{400, "InvalidAttributeValue", "InvalidParameterValue", fmt.Sprintf("Message attribute '%s' must contain a non-empty value of type '%s'.", name, base)}
			}
			if i := validText(*v.StringValue); i >= 0 {
				return 0, &apiError{400, "InvalidMessageContents", "InvalidMessageContents", fmt.Sprintf("Message attribute '%s' has a character SQS does not allow at byte %d.", name, i)}
			}
			size += len(*v.StringValue)
		case "Binary":
			if len(v.BinaryValue) == 0 {
				return 0, &apiError{400, "InvalidAttributeValue", "InvalidParameterValue", fmt.Sprintf("Message attribute '%s' must contain a non-empty value of type 'Binary'.", name)}
			}
			size += len(v.BinaryValue)
		default:
			return 0, &apiError{400, "InvalidAttributeValue", "InvalidParameterValue", fmt.Sprintf("Message attribute '%s' has an invalid data type %q.", name, v.DataType)}
		}
		size += len(name) + len(v.DataType)
	}
	return size, nil
}
