"""The plan JSON Schema the planners constrain a model's answer to.

It is derived from the registry and lives in :mod:`dagagent.plan_schema`, beside the registry
(which must not import the planners); this module re-exports it for the planners' users.
"""

from dagagent.plan_schema import (
    PLAN_FORMAT_NAME,
    REFERENCE_PATTERN,
    drop_null_optionals,
    optional_args,
    plan_json_schema,
    plan_response_format,
    strict_problems,
)

__all__ = [
    "PLAN_FORMAT_NAME",
    "REFERENCE_PATTERN",
    "drop_null_optionals",
    "optional_args",
    "plan_json_schema",
    "plan_response_format",
    "strict_problems",
]
