-- Argo CD health check for messaging.consumergroup.io/v1alpha1 ConsumerGroup.
-- Install it under resource.customizations.health.messaging.consumergroup.io_ConsumerGroup in argocd-cm
-- (docs/gitops.md). It reads the conditions the operator writes:
--   Suspended - Paused is True: spec.paused freezes the published assignment (kubectl cg pause).
--   Degraded  - Stalled (or Degraded) is True: the spec or the pods must change (an invalid parameter or
--               annotation, duplicate member ids, an assignment too large); the last good assignment stays.
--   Progressing - the operator has not yet observed this spec, or Reconciling is True: a handoff or a
--               recovery is in flight and finishes by itself.
--   Healthy   - otherwise, with Ready's message (a group whose selector matches no pod is healthy: it
--               has nothing to assign).
local hs = {}

local function condition(conditions, type)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

local status = obj.status
if status == nil or status.observedGeneration == nil or
   (obj.metadata.generation ~= nil and status.observedGeneration < obj.metadata.generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe the current spec"
  return hs
end

local paused = condition(status.conditions, "Paused")
if paused ~= nil and paused.status == "True" then
  hs.status = "Suspended"
  hs.message = paused.message
  return hs
end

local stalled = condition(status.conditions, "Stalled")
local degraded = condition(status.conditions, "Degraded")
local reconciling = condition(status.conditions, "Reconciling")
local ready = condition(status.conditions, "Ready")

if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = stalled.reason .. ": " .. stalled.message
  return hs
end
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = degraded.reason .. ": " .. degraded.message
  return hs
end
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = reconciling.reason .. ": " .. reconciling.message
  return hs
end
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report the group"
  return hs
end
hs.status = "Healthy"
hs.message = ready.reason .. ": " .. ready.message
return hs
