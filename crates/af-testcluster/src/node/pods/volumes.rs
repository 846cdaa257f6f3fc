//! A Pod's volumes, made on the machine before its first container: an `emptyDir` a folder of
//! the Pod's (a Docker tmpfs volume for `medium: Memory`, so every container shares it), a
//! `secret`, `configMap`, `downwardAPI` or `projected` volume a folder written from the API (the
//! node reads only what the Node authorizer lets a kubelet read: what its Pods name), mounted
//! read-only as the kubelet mounts them. `fsGroup` owns what is made, group-writable, as the
//! kubelet sets volume ownership.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, ServiceAccount, Volume,
};
use kube::Api;
use kube::api::PostParams;

use super::create::{Backing, PodContext};

/// One file a volume holds: its path inside the volume, content and mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeFile {
    pub path: String,
    pub content: Vec<u8>,
    pub mode: u32,
}

/// `data` through `items` (all keys when none is given), as the kubelet projects a Secret or
/// ConfigMap. A missing key named by an item is an error unless the source is optional.
pub fn project(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: i32,
    optional: bool,
    source: &str,
) -> Result<Vec<VolumeFile>, String> {
    let mode = |m: Option<i32>| u32::try_from(m.unwrap_or(default_mode)).unwrap_or(0o644);
    match items {
        None => Ok(data
            .iter()
            .map(|(key, content)| VolumeFile {
                path: key.clone(),
                content: content.clone(),
                mode: mode(None),
            })
            .collect()),
        Some(items) => {
            let mut files = Vec::new();
            for item in items {
                match data.get(&item.key) {
                    Some(content) => files.push(VolumeFile {
                        path: item.path.clone(),
                        content: content.clone(),
                        mode: mode(item.mode),
                    }),
                    None if optional => {}
                    None => {
                        return Err(format!(
                            "configured key {:?} not found in {source}",
                            item.key
                        ));
                    }
                }
            }
            Ok(files)
        }
    }
}

fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, ByteString(v))| (k.clone(), v.clone()))
        .collect();
    for (key, value) in secret.string_data.iter().flatten() {
        data.insert(key.clone(), value.clone().into_bytes());
    }
    data
}

fn config_map_data(map: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = map
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    for (key, ByteString(value)) in map.binary_data.iter().flatten() {
        data.insert(key.clone(), value.clone());
    }
    data
}

/// A `downwardAPI` file's content: labels and annotations as `key="value"` lines, as the
/// kubelet writes them; a name, namespace or uid as it is.
pub fn downward(pod: &Pod, file: &DownwardAPIVolumeFile) -> Result<Vec<u8>, String> {
    let Some(field) = &file.field_ref else {
        return Err(format!(
            "downwardAPI file {:?}: this node writes fieldRef files only",
            file.path
        ));
    };
    let lines = |map: &Option<BTreeMap<String, String>>| {
        map.iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok(match field.field_path.as_str() {
        "metadata.labels" => lines(&pod.metadata.labels),
        "metadata.annotations" => lines(&pod.metadata.annotations),
        "metadata.name" => pod.metadata.name.clone().unwrap_or_default(),
        "metadata.namespace" => pod.metadata.namespace.clone().unwrap_or_default(),
        "metadata.uid" => pod.metadata.uid.clone().unwrap_or_default(),
        other => {
            return Err(format!(
                "downwardAPI fieldRef {other:?} is not one this node writes"
            ));
        }
    }
    .into_bytes())
}

/// Writes `files` under `folder`, owned by `group` when given.
fn write(folder: &Path, files: &[VolumeFile], group: Option<u32>) -> Result<(), String> {
    std::fs::create_dir_all(folder).map_err(|e| format!("{}: {e}", folder.display()))?;
    for file in files {
        if file.path.split('/').any(|p| p == ".." || p.is_empty()) {
            return Err(format!(
                "volume file path {:?} leaves its volume",
                file.path
            ));
        }
        let path = folder.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, &file.content).map_err(|e| format!("{}: {e}", path.display()))?;
        let mode = if group.is_some() {
            file.mode | 0o040
        } else {
            file.mode
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(gid) = group {
            std::os::unix::fs::chown(&path, None, Some(gid))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    if let Some(gid) = group {
        std::os::unix::fs::chown(folder, None, Some(gid))
            .map_err(|e| format!("{}: {e}", folder.display()))?;
    }
    Ok(())
}

/// What the volumes of a Pod read from the API, with the node's identity.
struct Reader<'a> {
    client: kube::Client,
    pod: &'a Pod,
    namespace: String,
}

impl Reader<'_> {
    async fn secret(
        &self,
        name: &str,
        optional: bool,
    ) -> Result<BTreeMap<String, Vec<u8>>, String> {
        match Api::<Secret>::namespaced(self.client.clone(), &self.namespace)
            .get_opt(name)
            .await
        {
            Ok(Some(secret)) => Ok(secret_data(&secret)),
            Ok(None) if optional => Ok(BTreeMap::new()),
            Ok(None) => Err(format!("secret {name:?} not found")),
            Err(err) => Err(format!("reading secret {name:?}: {err}")),
        }
    }

    async fn config_map(
        &self,
        name: &str,
        optional: bool,
    ) -> Result<BTreeMap<String, Vec<u8>>, String> {
        match Api::<ConfigMap>::namespaced(self.client.clone(), &self.namespace)
            .get_opt(name)
            .await
        {
            Ok(Some(map)) => Ok(config_map_data(&map)),
            Ok(None) if optional => Ok(BTreeMap::new()),
            Ok(None) => Err(format!("configmap {name:?} not found")),
            Err(err) => Err(format!("reading configmap {name:?}: {err}")),
        }
    }

    /// A token of the Pod's service account, bound to the Pod (as the kubelet requests one for a
    /// projected volume).
    async fn token(
        &self,
        audience: Option<String>,
        seconds: Option<i64>,
    ) -> Result<Vec<u8>, String> {
        let spec = self.pod.spec.clone().unwrap_or_default();
        let account = spec
            .service_account_name
            .unwrap_or_else(|| "default".to_string());
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: audience.into_iter().collect(),
                expiration_seconds: Some(seconds.unwrap_or(3600)),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".to_string()),
                    kind: Some("Pod".to_string()),
                    name: self.pod.metadata.name.clone(),
                    uid: self.pod.metadata.uid.clone(),
                }),
            },
            ..Default::default()
        };
        let answer: TokenRequest =
            Api::<ServiceAccount>::namespaced(self.client.clone(), &self.namespace)
                .create_subresource("token", &account, &PostParams::default(), &request)
                .await
                .map_err(|e| format!("requesting a token of service account {account:?}: {e}"))?;
        Ok(answer
            .status
            .map(|s| s.token)
            .unwrap_or_default()
            .into_bytes())
    }

    /// The files of one volume that the API fills.
    async fn files(&self, volume: &Volume) -> Result<Vec<VolumeFile>, String> {
        if let Some(source) = &volume.secret {
            let name = source.secret_name.clone().unwrap_or_default();
            let optional = source.optional == Some(true);
            let data = self.secret(&name, optional).await?;
            return project(
                &data,
                source.items.as_deref(),
                source.default_mode.unwrap_or(0o644),
                optional,
                &format!("secret {name:?}"),
            );
        }
        if let Some(source) = &volume.config_map {
            let optional = source.optional == Some(true);
            let data = self.config_map(&source.name, optional).await?;
            return project(
                &data,
                source.items.as_deref(),
                source.default_mode.unwrap_or(0o644),
                optional,
                &format!("configmap {:?}", source.name),
            );
        }
        if let Some(source) = &volume.downward_api {
            let mode = source.default_mode.unwrap_or(0o644);
            let mut files = Vec::new();
            for item in source.items.iter().flatten() {
                files.push(VolumeFile {
                    path: item.path.clone(),
                    content: downward(self.pod, item)?,
                    mode: u32::try_from(item.mode.unwrap_or(mode)).unwrap_or(0o644),
                });
            }
            return Ok(files);
        }
        if let Some(source) = &volume.projected {
            let mode = source.default_mode.unwrap_or(0o644);
            let mut files = Vec::new();
            for part in source.sources.iter().flatten() {
                if let Some(secret) = &part.secret {
                    let optional = secret.optional == Some(true);
                    let data = self.secret(&secret.name, optional).await?;
                    files.extend(project(
                        &data,
                        secret.items.as_deref(),
                        mode,
                        optional,
                        &format!("secret {:?}", secret.name),
                    )?);
                }
                if let Some(map) = &part.config_map {
                    let optional = map.optional == Some(true);
                    let data = self.config_map(&map.name, optional).await?;
                    files.extend(project(
                        &data,
                        map.items.as_deref(),
                        mode,
                        optional,
                        &format!("configmap {:?}", map.name),
                    )?);
                }
                if let Some(api) = &part.downward_api {
                    for item in api.items.iter().flatten() {
                        files.push(VolumeFile {
                            path: item.path.clone(),
                            content: downward(self.pod, item)?,
                            mode: u32::try_from(item.mode.unwrap_or(mode)).unwrap_or(0o644),
                        });
                    }
                }
                if let Some(token) = &part.service_account_token {
                    files.push(VolumeFile {
                        path: token.path.clone(),
                        content: self
                            .token(token.audience.clone(), token.expiration_seconds)
                            .await?,
                        mode: u32::try_from(mode).unwrap_or(0o644),
                    });
                }
            }
            return Ok(files);
        }
        Ok(Vec::new())
    }
}

/// Makes every volume of `pod` under `dir`; each volume's backing by name. A Docker volume made
/// for a memory `emptyDir` carries the Pod's labels, so the Pod's teardown removes it.
pub async fn make(
    client: kube::Client,
    docker: &bollard::Docker,
    context: &PodContext,
    pod: &Pod,
    dir: &Path,
) -> Result<BTreeMap<String, Backing>, String> {
    let spec = pod.spec.clone().unwrap_or_default();
    let group = spec
        .security_context
        .as_ref()
        .and_then(|s| s.fs_group)
        .and_then(|g| u32::try_from(g).ok());
    let reader = Reader {
        client,
        pod,
        namespace: context.namespace.clone(),
    };
    let mut backings = BTreeMap::new();
    for volume in spec.volumes.iter().flatten() {
        let folder: PathBuf = dir.join("volumes").join(&volume.name);
        if let Some(empty) = &volume.empty_dir {
            if empty.medium.as_deref() == Some("Memory") {
                let name = format!("{}-{}", context.holder(), volume.name);
                docker
                    .create_volume(bollard::models::VolumeCreateRequest {
                        name: Some(name.clone()),
                        driver: Some("local".to_string()),
                        driver_opts: Some(std::collections::HashMap::from([
                            ("type".to_string(), "tmpfs".to_string()),
                            ("device".to_string(), "tmpfs".to_string()),
                        ])),
                        labels: Some(context.labels(super::create::Kind::Holder, &volume.name, 0)),
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| format!("making emptyDir {:?} in memory: {e}", volume.name))?;
                backings.insert(volume.name.clone(), Backing::Volume(name));
                continue;
            }
            std::fs::create_dir_all(&folder).map_err(|e| format!("{}: {e}", folder.display()))?;
            // As the kubelet makes an emptyDir: writable by anyone; group-owned by fsGroup with
            // the set-group-id bit, so what is made inside stays the group's.
            let mode = if group.is_some() { 0o2777 } else { 0o777 };
            std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(mode))
                .map_err(|e| format!("{}: {e}", folder.display()))?;
            if let Some(gid) = group {
                std::os::unix::fs::chown(&folder, None, Some(gid))
                    .map_err(|e| format!("{}: {e}", folder.display()))?;
            }
            backings.insert(
                volume.name.clone(),
                Backing::Folder {
                    path: folder,
                    read_only: false,
                },
            );
            continue;
        }
        if volume.persistent_volume_claim.is_some() {
            return Err(format!(
                "volume {:?}: this node does not yet bind PersistentVolumeClaims",
                volume.name
            ));
        }
        let files = reader.files(volume).await?;
        write(&folder, &files, group)?;
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", folder.display()))?;
        backings.insert(
            volume.name.clone(),
            Backing::Folder {
                path: folder,
                read_only: true,
            },
        );
    }
    Ok(backings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_choose_keys_and_paths_and_a_missing_key_is_an_error_unless_optional() {
        let data = BTreeMap::from([
            ("config.yaml".to_string(), b"a: 1".to_vec()),
            ("token".to_string(), b"t".to_vec()),
        ]);
        let all = project(&data, None, 0o644, false, "secret \"s\"").unwrap();
        assert_eq!(all.len(), 2);
        let items = [KeyToPath {
            key: "token".into(),
            path: "auth/token".into(),
            mode: Some(0o400),
        }];
        let chosen = project(&data, Some(&items), 0o644, false, "secret \"s\"").unwrap();
        assert_eq!(
            chosen,
            [VolumeFile {
                path: "auth/token".into(),
                content: b"t".to_vec(),
                mode: 0o400
            }]
        );
        let missing = [KeyToPath {
            key: "nope".into(),
            path: "x".into(),
            mode: None,
        }];
        assert!(project(&data, Some(&missing), 0o644, false, "secret \"s\"").is_err());
        assert!(
            project(&data, Some(&missing), 0o644, true, "secret \"s\"")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn downward_files_are_written_as_the_kubelet_writes_them() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "labels": {"app": "web", "tier": "front"}}
        }))
        .unwrap();
        let file: DownwardAPIVolumeFile = serde_json::from_value(serde_json::json!({
            "path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}
        }))
        .unwrap();
        assert_eq!(
            String::from_utf8(downward(&pod, &file).unwrap()).unwrap(),
            "app=\"web\"\ntier=\"front\""
        );
    }
}
