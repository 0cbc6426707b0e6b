package msp

// Images a user gives a turn, and instructions a session is given.

// MessageAttachment is one image of a userMessage item (its attachments):
// metadata only, as upstream has it; the bytes stay in the session's log.
// OutputRef is mspd's additive member: item/readOutput with its id serves
// the stored bytes (encoding base64).
type MessageAttachment struct {
	Type      string     `json:"type"`
	MediaType string     `json:"mediaType"`
	Width     *int       `json:"width,omitempty"`
	Height    *int       `json:"height,omitempty"`
	OutputRef *OutputRef `json:"outputRef,omitempty"`
}

// Values of image input parts and attachments.
const (
	// InputText and InputImage are TurnInputPart types.
	InputText  = "text"
	InputImage = "image"
	// AttachmentImage is MessageAttachment.Type of an image.
	AttachmentImage = "image"
	// OutputKindImage is OutputRef.Kind of an attachment's stored image.
	OutputKindImage = "image"
)

// Bounds of what a client gives with a turn or a session (mspd's): an
// image is at most MaxImageBytes decoded, a turn carries at most
// MaxTurnImages of them, and a session's instructions are at most
// MaxInstructionsBytes. The turn/start frame itself is bounded by
// --max-frame-bytes.
const (
	MaxImageBytes        = 5 << 20
	MaxTurnImages        = 8
	MaxInstructionsBytes = 32 << 10
)

// Reasons of refusals of images and instructions (ErrorData.Reason).
const (
	ReasonModelCannotTakeImages = "modelCannotTakeImages"
	ReasonBadImage              = "badImage"
)
