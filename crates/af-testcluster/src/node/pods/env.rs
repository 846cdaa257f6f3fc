//! A container's environment, as the kubelet makes it: the Services' variables first (those of
//! the Pod's namespace unless `enableServiceLinks: false`, and the API server's `kubernetes`
//! Service always), then `envFrom`, then `env` (a later name wins), with `$(NAME)` references to
//! earlier variables expanded. A missing Secret, ConfigMap or key that is not optional is the
//! kubelet's `CreateContainerConfigError`, with its message.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret, Service};

/// What the environment reads from the API: the Pod's namespace's Secrets and ConfigMaps it names.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    pub secrets: BTreeMap<String, Secret>,
    pub config_maps: BTreeMap<String, ConfigMap>,
}

/// The Secret and ConfigMap names `container`'s environment reads.
pub fn referenced(container: &Container) -> (Vec<String>, Vec<String>) {
    let mut secrets = Vec::new();
    let mut config_maps = Vec::new();
    for from in container.env_from.iter().flatten() {
        if let Some(s) = &from.secret_ref {
            secrets.push(s.name.clone());
        }
        if let Some(c) = &from.config_map_ref {
            config_maps.push(c.name.clone());
        }
    }
    for var in container.env.iter().flatten() {
        if let Some(source) = &var.value_from {
            if let Some(s) = &source.secret_key_ref {
                secrets.push(s.name.clone());
            }
            if let Some(c) = &source.config_map_key_ref {
                config_maps.push(c.name.clone());
            }
        }
    }
    (secrets, config_maps)
}

fn variable_name(service: &str) -> String {
    service.to_uppercase().replace('-', "_")
}

/// The variables of `services` a container of a Pod in `namespace` gets (`kubernetes` from
/// `default` always; the others only with service links).
pub fn service_variables(
    services: &[Service],
    namespace: &str,
    links: bool,
) -> Vec<(String, String)> {
    let mut chosen: BTreeMap<String, &Service> = BTreeMap::new();
    for service in services {
        let ns = service.metadata.namespace.as_deref().unwrap_or_default();
        let name = service.metadata.name.clone().unwrap_or_default();
        let master = ns == "default" && name == "kubernetes";
        if (links && ns == namespace) || (master && !chosen.contains_key(&name)) {
            chosen.insert(name, service);
        }
    }
    let mut out = Vec::new();
    for (name, service) in chosen {
        let Some(spec) = service.spec.as_ref() else {
            continue;
        };
        let Some(ip) = spec
            .cluster_ip
            .as_deref()
            .filter(|ip| !ip.is_empty() && *ip != "None")
        else {
            continue;
        };
        let prefix = variable_name(&name);
        let ports = spec.ports.clone().unwrap_or_default();
        out.push((format!("{prefix}_SERVICE_HOST"), ip.to_string()));
        if let Some(first) = ports.first() {
            out.push((format!("{prefix}_SERVICE_PORT"), first.port.to_string()));
        }
        for port in &ports {
            if let Some(port_name) = port.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((
                    format!("{prefix}_SERVICE_PORT_{}", variable_name(port_name)),
                    port.port.to_string(),
                ));
            }
        }
        for (index, port) in ports.iter().enumerate() {
            let protocol = port.protocol.clone().unwrap_or_else(|| "TCP".to_string());
            let url = format!("{}://{ip}:{}", protocol.to_lowercase(), port.port);
            if index == 0 {
                out.push((format!("{prefix}_PORT"), url.clone()));
            }
            let port_prefix = format!("{prefix}_PORT_{}_{}", port.port, protocol.to_uppercase());
            out.push((port_prefix.clone(), url));
            out.push((format!("{port_prefix}_PROTO"), protocol.to_lowercase()));
            out.push((format!("{port_prefix}_PORT"), port.port.to_string()));
            out.push((format!("{port_prefix}_ADDR"), ip.to_string()));
        }
    }
    out
}

/// `$(NAME)` replaced by `NAME`'s value where it is defined, `$$` by `$`; anything else kept.
pub fn expand(text: &str, defined: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some(value) = defined.get(&inner[..end])
        {
            out.push_str(value);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A field of the Pod a `fieldRef` names.
fn pod_field(pod: &Pod, path: &str, pod_ip: &str, host_ip: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let labelled = |map: &Option<BTreeMap<String, String>>, key: &str| {
        map.as_ref()
            .and_then(|m| m.get(key))
            .cloned()
            .unwrap_or_default()
    };
    if let Some(key) = path
        .strip_prefix("metadata.labels['")
        .and_then(|k| k.strip_suffix("']"))
    {
        return Ok(labelled(&meta.labels, key));
    }
    if let Some(key) = path
        .strip_prefix("metadata.annotations['")
        .and_then(|k| k.strip_suffix("']"))
    {
        return Ok(labelled(&meta.annotations, key));
    }
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.node_name.unwrap_or_default(),
        "spec.serviceAccountName" => spec.service_account_name.unwrap_or_default(),
        "status.podIP" | "status.podIPs" => pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => host_ip.to_string(),
        other => return Err(format!("unsupported fieldRef {other:?}")),
    })
}

/// A `resourceFieldRef` of `container` (`limits.cpu` in whole cores rounded up, as the kubelet
/// gives it with the default divisor; memory in bytes).
fn resource_field(container: &Container, resource: &str) -> Result<String, String> {
    let (kind, name) = resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported resourceFieldRef {resource:?}"))?;
    let figures = container.resources.as_ref().and_then(|r| match kind {
        "limits" => r.limits.clone(),
        "requests" => r.requests.clone(),
        _ => None,
    });
    let quantity = figures.and_then(|f| f.get(name).cloned());
    let Some(quantity) = quantity else {
        return Ok("0".to_string());
    };
    match name {
        "cpu" => Ok(crate::node::quantity::cpu_millis(&quantity.0)
            .map(|m| m.div_ceil(1000).to_string())
            .unwrap_or_default()),
        "memory" => Ok(crate::node::quantity::bytes(&quantity.0)
            .map(|b| b.to_string())
            .unwrap_or_default()),
        other => Err(format!("unsupported resourceFieldRef {kind}.{other}")),
    }
}

/// `container`'s environment, as `NAME=value` in the order the kubelet sets it.
pub fn resolve(
    pod: &Pod,
    container: &Container,
    sources: &Sources,
    services: &[(String, String)],
    (pod_ip, host_ip): (&str, &str),
) -> Result<Vec<(String, String)>, String> {
    let mut variables = Ordered::default();
    for (name, value) in services {
        variables.set(name.clone(), value.clone());
    }
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(reference) = &from.secret_ref {
            match sources.secrets.get(&reference.name) {
                Some(secret) => {
                    for (key, value) in secret.data.iter().flatten() {
                        variables.set(
                            format!("{prefix}{key}"),
                            String::from_utf8_lossy(&value.0).into_owned(),
                        );
                    }
                }
                None if reference.optional == Some(true) => {}
                None => {
                    return Err(format!("secret {:?} not found", reference.name));
                }
            }
        }
        if let Some(reference) = &from.config_map_ref {
            match sources.config_maps.get(&reference.name) {
                Some(map) => {
                    for (key, value) in map.data.iter().flatten() {
                        variables.set(format!("{prefix}{key}"), value.clone());
                    }
                }
                None if reference.optional == Some(true) => {}
                None => {
                    return Err(format!("configmap {:?} not found", reference.name));
                }
            }
        }
    }
    for var in container.env.iter().flatten() {
        let value = match &var.value_from {
            None => expand(var.value.as_deref().unwrap_or_default(), &variables.values),
            Some(source) => {
                if let Some(key) = &source.secret_key_ref {
                    let found = sources
                        .secrets
                        .get(&key.name)
                        .map(|s| s.data.clone().unwrap_or_default().get(&key.key).cloned());
                    match found {
                        Some(Some(value)) => String::from_utf8_lossy(&value.0).into_owned(),
                        _ if key.optional == Some(true) => continue,
                        None => {
                            return Err(format!("secret {:?} not found", key.name));
                        }
                        Some(None) => {
                            return Err(format!(
                                "couldn't find key {} in Secret {}/{}",
                                key.key,
                                pod.metadata.namespace.as_deref().unwrap_or_default(),
                                key.name
                            ));
                        }
                    }
                } else if let Some(key) = &source.config_map_key_ref {
                    let found = sources
                        .config_maps
                        .get(&key.name)
                        .map(|c| c.data.clone().unwrap_or_default().get(&key.key).cloned());
                    match found {
                        Some(Some(value)) => value,
                        _ if key.optional == Some(true) => continue,
                        None => {
                            return Err(format!("configmap {:?} not found", key.name));
                        }
                        Some(None) => {
                            return Err(format!(
                                "couldn't find key {} in ConfigMap {}/{}",
                                key.key,
                                pod.metadata.namespace.as_deref().unwrap_or_default(),
                                key.name
                            ));
                        }
                    }
                } else if let Some(field) = &source.field_ref {
                    pod_field(pod, &field.field_path, pod_ip, host_ip)?
                } else if let Some(resource) = &source.resource_field_ref {
                    resource_field(container, &resource.resource)?
                } else {
                    return Err(format!("variable {} has an empty valueFrom", var.name));
                }
            }
        };
        variables.set(var.name.clone(), value);
    }
    Ok(variables.into_list())
}

/// Variables in the order they were first set, a later value replacing an earlier one.
#[derive(Default)]
struct Ordered {
    order: Vec<String>,
    values: BTreeMap<String, String>,
}

impl Ordered {
    fn set(&mut self, name: String, value: String) {
        if !self.values.contains_key(&name) {
            self.order.push(name.clone());
        }
        self.values.insert(name, value);
    }

    fn into_list(mut self) -> Vec<(String, String)> {
        self.order
            .into_iter()
            .map(|name| {
                let value = self.values.remove(&name).unwrap_or_default();
                (name, value)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn service_variables_are_the_kubelets() {
        let services: Vec<Service> = vec![
            from(serde_json::json!({
                "metadata": {"name": "kubernetes", "namespace": "default"},
                "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}
            })),
            from(serde_json::json!({
                "metadata": {"name": "my-db", "namespace": "shop"},
                "spec": {"clusterIP": "10.96.4.5", "ports": [{"port": 5432, "protocol": "TCP"}]}
            })),
            from(serde_json::json!({
                "metadata": {"name": "headless", "namespace": "shop"},
                "spec": {"clusterIP": "None", "ports": [{"port": 80}]}
            })),
            from(serde_json::json!({
                "metadata": {"name": "elsewhere", "namespace": "other"},
                "spec": {"clusterIP": "10.96.9.9", "ports": [{"port": 80}]}
            })),
        ];
        let linked: BTreeMap<String, String> = service_variables(&services, "shop", true)
            .into_iter()
            .collect();
        assert_eq!(linked["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
        assert_eq!(linked["KUBERNETES_SERVICE_PORT"], "443");
        assert_eq!(linked["KUBERNETES_SERVICE_PORT_HTTPS"], "443");
        assert_eq!(linked["KUBERNETES_PORT"], "tcp://10.96.0.1:443");
        assert_eq!(linked["MY_DB_PORT_5432_TCP_ADDR"], "10.96.4.5");
        assert_eq!(linked["MY_DB_PORT_5432_TCP"], "tcp://10.96.4.5:5432");
        assert!(!linked.keys().any(|k| k.starts_with("HEADLESS")));
        assert!(!linked.keys().any(|k| k.starts_with("ELSEWHERE")));
        let unlinked: BTreeMap<String, String> = service_variables(&services, "shop", false)
            .into_iter()
            .collect();
        assert!(unlinked.contains_key("KUBERNETES_SERVICE_HOST"));
        assert!(!unlinked.keys().any(|k| k.starts_with("MY_DB")));
    }

    #[test]
    fn references_expand_as_the_kubelet_expands_them() {
        let defined = BTreeMap::from([("A".to_string(), "1".to_string())]);
        assert_eq!(expand("x$(A)y", &defined), "x1y");
        assert_eq!(expand("$(B)", &defined), "$(B)");
        assert_eq!(expand("$$(A)", &defined), "$(A)");
        assert_eq!(expand("cost $5", &defined), "cost $5");
    }

    #[test]
    fn values_come_from_secrets_config_maps_and_the_pod_and_a_missing_one_is_a_config_error() {
        let pod: Pod = from(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"nodeName": "af-node", "containers": []}
        }));
        let container: Container = from(serde_json::json!({
            "name": "web",
            "env": [
                {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "keys", "key": "payments"}}},
                {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
                {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "BOTH", "value": "$(ME)@$(IP)"}
            ]
        }));
        let mut sources = Sources::default();
        sources.secrets.insert(
            "keys".into(),
            from(serde_json::json!({"data": {"payments": "c2VjcmV0"}})),
        );
        sources.config_maps.insert(
            "settings".into(),
            from(serde_json::json!({"data": {"mode": "test"}})),
        );
        let env: BTreeMap<String, String> =
            resolve(&pod, &container, &sources, &[], ("10.244.0.5", "127.0.0.1"))
                .unwrap()
                .into_iter()
                .collect();
        assert_eq!(env["KEY"], "secret");
        assert_eq!(env["MODE"], "test");
        assert_eq!(env["APP"], "web");
        assert_eq!(env["BOTH"], "web-1@10.244.0.5");
        sources.secrets.clear();
        let missing = resolve(&pod, &container, &sources, &[], ("", "")).unwrap_err();
        assert_eq!(missing, "secret \"keys\" not found");
    }
}
