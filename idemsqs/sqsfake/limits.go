package sqsfake

import (
	"fmt"
	"strings"
	"time"

	"github.com/idemhq/idem/idemsqs/internal/sqsrules"
)

// DedupWindow is how long SQS remembers a MessageDeduplicationId: fixed, from the
// first send of the id.
const DedupWindow = 5 * time.Minute

// SQS's limits, as AWS documents them.
const (
	MaxAttributes      = 10 // message attributes per message
	MaxAttributeName   = sqsrules.MaxAttributeName
	MaxBatchEntries    = 10
	MaxGroupOrDedupLen = sqsrules.MaxGroupOrDedupLen
	MaxVisibility      = 12 * 60 * 60 // seconds
	MaxWaitSeconds     = 20
	DefaultMaxSize     = 256 << 10 // MaximumMessageSize when a queue does not set it
	MaxMessageSize     = 1 << 20   // the largest MaximumMessageSize
	MinMessageSize     = 1 << 10   // the smallest MaximumMessageSize
	maxQueueName       = 80
	maxBatchEntryID    = 80
)

func validQueueName(name string) error {
	base := strings.TrimSuffix(name, ".fifo")
	if name == "" || len(name) > maxQueueName {
		return fmt.Errorf("queue names are 1 to %d characters (got %d)", maxQueueName, len(name))
	}
	for i := 0; i < len(base); i++ {
		if c := base[i]; !sqsrules.IsAlnum(c) && c != '-' && c != '_' {
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
		if c := id[i]; !sqsrules.IsAlnum(c) && c != '-' && c != '_' {
			return false
		}
	}
	return true
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
		if err := sqsrules.AttributeName(name); err != nil {
			return 0, &apiError{400, "InvalidAttributeName", "InvalidAttributeName", fmt.Sprintf("Message attribute name %q %v.", name, err)}
		}
		base, _, _ := strings.Cut(v.DataType, ".")
		switch base {
		case "String", "Number":
			if v.StringValue == nil || *v.StringValue == "" {
				return 0, &apiError{400, "InvalidAttributeValue", "InvalidParameterValue", fmt.Sprintf("Message attribute '%s' must contain a non-empty value of type '%s'.", name, base)}
			}
			if i := sqsrules.ValidText(*v.StringValue); i >= 0 {
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
