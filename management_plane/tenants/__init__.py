"""Tenants (customer onboarding): plans, SCRAM users, prefixed ACLs, quotas and
topics within limits. See docs/tenants.md.

This namespace holds the pure core (model, acls, topics). The Kafka adapter is imported on
its own: `from management_plane.tenants.kafka import KafkaTenants` (with
`management_plane.tenants.quotas.UserQuotaTool`).
"""

from management_plane.tenants.acls import AclGrant, AclOperation, AclResource, tenant_acl_grants
from management_plane.tenants.model import (
    PLANS,
    ConnectionDetails,
    Problem,
    Tenant,
    TenantError,
    TenantPlan,
    new_tenant,
    plan_from_json,
    prefixes_overlap,
    tenant_from_json,
)
from management_plane.tenants.topics import (
    TOPIC_CONFIG_WHITELIST,
    ExistingTopic,
    TopicRequest,
    TopicToCreate,
    check_topic_deletion,
    check_topic_request,
    topic_request_problems,
)

__all__ = [
    "PLANS",
    "TOPIC_CONFIG_WHITELIST",
    "AclGrant",
    "AclOperation",
    "AclResource",
    "ConnectionDetails",
    "ExistingTopic",
    "Problem",
    "Tenant",
    "TenantError",
    "TenantPlan",
    "TopicRequest",
    "TopicToCreate",
    "check_topic_deletion",
    "check_topic_request",
    "new_tenant",
    "plan_from_json",
    "prefixes_overlap",
    "tenant_acl_grants",
    "tenant_from_json",
    "topic_request_problems",
]
