# An example tool-call policy for agentry's policy guardrail (docs/guardrails.md).
#
#   agentry run --policy docs/examples/guardrails.rego --tool read_file ...
#
# input: {"caller": {"principal", "tenant", "permissions"}, "tool": {"name", "description"},
#         "call_id", "arguments"}
package agentry

# Reasons to refuse a call; the model reads them.
deny contains "reading outside the workspace is not allowed" if {
	input.tool.name == "read_file"
	startswith(input.arguments.path, "/")
}

deny contains "paths may not climb out of the workspace" if {
	contains(input.arguments.path, "..")
}

deny contains sprintf("tenant %s may not send email", [input.caller.tenant]) if {
	input.tool.name == "send_email"
	input.caller.tenant == "trial"
}

# Reasons to ask a person first (the approval flow, docs/approval.md).
require_approval contains "deleting needs a person's approval" if {
	startswith(input.tool.name, "delete_")
	not "files:delete" in input.caller.permissions
}
