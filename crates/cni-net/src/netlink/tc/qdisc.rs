//! Adding, replacing, listing and deleting qdiscs.

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::tc::{TcAttribute, TcHeader, TcMessage, TcOption};
use netlink_packet_route::RouteNetlinkMessage;

use super::tbf::{raw_value, TbfParams};
use super::{header_index, TcHandle};
use crate::error::Result;
use crate::netlink::{context, Netlink};

/// The qdisc to create and its options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QdiscOptions {
    /// Token bucket filter.
    Tbf(TbfParams),
    /// The classic ingress hook (`ingress`).
    Ingress,
    /// The ingress and egress hooks (`clsact`); shares its slot with `ingress`.
    Clsact,
}

impl QdiscOptions {
    fn kind(&self) -> &'static str {
        match self {
            QdiscOptions::Tbf(_) => "tbf",
            QdiscOptions::Ingress => "ingress",
            QdiscOptions::Clsact => "clsact",
        }
    }
}

/// A qdisc as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QdiscKind {
    Tbf(TbfParams),
    Ingress,
    Clsact,
    /// Any other qdisc, by its kind name (`noqueue`, `fq_codel`, `htb`, ...).
    Other(String),
}

/// One qdisc of a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qdisc {
    pub index: u32,
    pub handle: TcHandle,
    pub parent: TcHandle,
    pub kind: QdiscKind,
}

impl Qdisc {
    /// The kind name `tc` prints.
    pub fn kind_name(&self) -> &str {
        match &self.kind {
            QdiscKind::Tbf(_) => "tbf",
            QdiscKind::Ingress => "ingress",
            QdiscKind::Clsact => "clsact",
            QdiscKind::Other(name) => name,
        }
    }

    /// Attached at the root of the device's egress.
    pub fn is_root(&self) -> bool {
        self.parent == TcHandle::ROOT
    }

    /// The ingress/clsact hook qdisc.
    pub fn is_ingress_hook(&self) -> bool {
        self.parent == TcHandle::INGRESS
    }

    /// A qdisc the kernel attached by itself (`noqueue`, the default `pfifo_fast`/
    /// `fq_codel`/`mq`): those have handle major 0, while every qdisc a user adds gets a
    /// non-zero major (chosen or allocated from `8000:` up).
    pub fn is_kernel_default(&self) -> bool {
        self.handle.major() == 0
    }

    pub(crate) fn from_message(message: &TcMessage) -> Qdisc {
        let mut name = String::new();
        let mut options: Option<Vec<u8>> = None;
        for attribute in &message.attributes {
            match attribute {
                TcAttribute::Kind(kind) => name = kind.clone(),
                TcAttribute::Options(list) => {
                    // Kinds the packet crate does not model arrive as one raw attribute
                    // holding the nested options.
                    if let [TcOption::Other(raw)] = list.as_slice() {
                        options = Some(raw_value(raw));
                    }
                }
                _ => {}
            }
        }
        let kind = match name.as_str() {
            "ingress" => QdiscKind::Ingress,
            "clsact" => QdiscKind::Clsact,
            "tbf" => match options.as_deref().and_then(TbfParams::from_nested) {
                Some(params) => QdiscKind::Tbf(params),
                None => QdiscKind::Other(name),
            },
            _ => QdiscKind::Other(name),
        };
        Qdisc {
            index: message.header.index as u32,
            handle: message.header.handle.into(),
            parent: message.header.parent.into(),
            kind,
        }
    }
}

/// Where a new qdisc goes and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QdiscSpec {
    pub index: u32,
    pub parent: TcHandle,
    pub handle: TcHandle,
    pub options: QdiscOptions,
}

impl QdiscSpec {
    /// A token bucket filter at the root of device `index`, with handle `handle`.
    pub fn tbf_root(index: u32, handle: TcHandle, params: TbfParams) -> QdiscSpec {
        QdiscSpec { index, parent: TcHandle::ROOT, handle, options: QdiscOptions::Tbf(params) }
    }

    /// The `ingress` qdisc of device `index`.
    pub fn ingress(index: u32) -> QdiscSpec {
        QdiscSpec {
            index,
            parent: TcHandle::INGRESS,
            handle: TcHandle::INGRESS_QDISC,
            options: QdiscOptions::Ingress,
        }
    }

    /// The `clsact` qdisc of device `index`.
    pub fn clsact(index: u32) -> QdiscSpec {
        QdiscSpec { options: QdiscOptions::Clsact, ..QdiscSpec::ingress(index) }
    }

    pub(super) fn to_message(self) -> Result<TcMessage> {
        let header = TcHeader {
            index: header_index(self.index)?,
            handle: self.handle.into(),
            parent: self.parent.into(),
            ..Default::default()
        };
        let mut attributes = vec![TcAttribute::Kind(self.options.kind().to_string())];
        if let QdiscOptions::Tbf(params) = self.options {
            attributes.push(TcAttribute::Options(params.to_options()));
        }
        Ok(TcMessage::from_parts(header, attributes))
    }
}

impl Netlink {
    /// Adds a qdisc; one already in that place is an error (`EEXIST`).
    pub fn add_qdisc(&mut self, spec: &QdiscSpec) -> Result<()> {
        let message = spec.to_message()?;
        context(
            self.request(RouteNetlinkMessage::NewQueueDiscipline(message), NLM_F_CREATE | NLM_F_EXCL),
            || format!("add {} qdisc {} on link #{}", spec.options.kind(), spec.parent, spec.index),
        )
    }

    /// Adds a qdisc, or replaces the one in that place.
    pub fn replace_qdisc(&mut self, spec: &QdiscSpec) -> Result<()> {
        let message = spec.to_message()?;
        context(
            self.request(RouteNetlinkMessage::NewQueueDiscipline(message), NLM_F_CREATE | NLM_F_REPLACE),
            || format!("replace {} qdisc {} on link #{}", spec.options.kind(), spec.parent, spec.index),
        )
    }

    /// Deletes the qdisc at `parent` of device `index` (deleting the root qdisc gives the
    /// device its default one back). A missing qdisc is a not-found error.
    pub fn delete_qdisc(&mut self, index: u32, parent: TcHandle, handle: TcHandle) -> Result<()> {
        let header = TcHeader {
            index: header_index(index)?,
            handle: handle.into(),
            parent: parent.into(),
            ..Default::default()
        };
        let message = TcMessage::from_parts(header, Vec::new());
        context(self.request(RouteNetlinkMessage::DelQueueDiscipline(message), 0), || {
            format!("delete qdisc {parent} on link #{index}")
        })
    }

    /// Lists the qdiscs of device `index`, or of every device.
    pub fn qdiscs(&mut self, index: Option<u32>) -> Result<Vec<Qdisc>> {
        let filter = index.map(header_index).transpose()?.unwrap_or(0);
        let request = RouteNetlinkMessage::GetQueueDiscipline(TcMessage::with_index(filter));
        let replies = context(self.dump(request), || "list qdiscs".to_string())?;
        Ok(replies
            .iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewQueueDiscipline(message) => Some(Qdisc::from_message(message)),
                _ => None,
            })
            // Older kernels ignore the index in dump requests.
            .filter(|qdisc| index.is_none_or(|index| qdisc.index == index))
            .collect())
    }

    /// The root qdisc of device `index`, if the kernel reports one (a device that is down
    /// reports none).
    pub fn root_qdisc(&mut self, index: u32) -> Result<Option<Qdisc>> {
        Ok(self.qdiscs(Some(index))?.into_iter().find(Qdisc::is_root))
    }

    /// The `ingress` or `clsact` qdisc of device `index`, if it has one.
    pub fn ingress_hook_qdisc(&mut self, index: u32) -> Result<Option<Qdisc>> {
        Ok(self.qdiscs(Some(index))?.into_iter().find(Qdisc::is_ingress_hook))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::Emitable;
    use netlink_packet_route::tc::TcMessageBuffer;

    fn encoded(message: &TcMessage) -> Vec<u8> {
        let mut bytes = vec![0u8; message.buffer_len()];
        message.emit(&mut bytes);
        bytes
    }

    #[test]
    fn tbf_root_encodes_and_decodes() {
        let params = TbfParams { rate: 1_250_000, buffer: 1_562_500, limit: 156_250 };
        let message = QdiscSpec::tbf_root(7, TcHandle::new(1, 0), params).to_message().unwrap();
        let bytes = encoded(&message);
        let header_len = std::mem::size_of::<TcMessageBuffer>();
        assert_eq!(header_len, 20);
        assert_eq!(i32::from_ne_bytes(bytes[4..8].try_into().unwrap()), 7);
        assert_eq!(u32::from_ne_bytes(bytes[8..12].try_into().unwrap()), 0x0001_0000);
        assert_eq!(u32::from_ne_bytes(bytes[12..16].try_into().unwrap()), 0xffff_ffff);
        // The kernel echoes the same layout in dumps; parse our own bytes as a reply.
        use netlink_packet_core::Parseable;
        let parsed = TcMessage::parse(bytes.as_slice()).unwrap();
        let qdisc = Qdisc::from_message(&parsed);
        assert_eq!(qdisc.kind, QdiscKind::Tbf(params));
        assert!(qdisc.is_root() && !qdisc.is_kernel_default());
        assert_eq!(qdisc.kind_name(), "tbf");
    }

    #[test]
    fn ingress_and_clsact_share_the_hook() {
        for spec in [QdiscSpec::ingress(3), QdiscSpec::clsact(3)] {
            use netlink_packet_core::Parseable;
            let bytes = encoded(&spec.to_message().unwrap());
            let qdisc = Qdisc::from_message(&TcMessage::parse(bytes.as_slice()).unwrap());
            assert!(qdisc.is_ingress_hook());
            assert_eq!(qdisc.handle, TcHandle::INGRESS_QDISC);
        }
        assert_eq!(QdiscSpec::clsact(3).options, QdiscOptions::Clsact);
    }

    #[test]
    fn out_of_range_index_is_refused() {
        assert!(QdiscSpec::ingress(u32::MAX).to_message().is_err());
    }
}
