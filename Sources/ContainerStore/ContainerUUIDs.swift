import Foundation
import Glibc

/// Where `run --layout ios` presents the container (docs/run.md, "The iOS layout"): iOS
/// keeps an app's data container and its bundle apart, each under a UUID of its own —
/// `/private/var/mobile/Containers/Data/Application/<data>/` and
/// `/private/var/containers/Bundle/Application/<bundle>/Name.app` — that stays the same
/// from launch to launch and changes when the app is updated or reinstalled, or restored
/// to another device. Recorded in the state folder (`ios-uuids`: the two UUIDs, one line
/// each), made at the first run that needs them, forgotten by `update` (and so by the
/// reinstall of an offloaded app) so that the next run draws new ones; a restore makes a
/// new store, whose first run draws its own.
public struct ContainerUUIDs: Equatable, Sendable {
    /// The data container's UUID (HOME).
    public let data: String
    /// The bundle container's UUID.
    public let bundle: String

    static let fileName = Array("ios-uuids".utf8)

    /// Two fresh UUIDs, upper-case as iOS shows them.
    public static func drawn() -> ContainerUUIDs {
        ContainerUUIDs(data: UUID().uuidString, bundle: UUID().uuidString)
    }

    /// The recorded UUIDs, or nil when none are (or the file is damaged: then new ones are drawn).
    public static func recorded(_ store: Store) -> ContainerUUIDs? {
        guard let bytes = try? readFile(at: store.stateFD, fileName, limit: smallStateFileLimit) else { return nil }
        let lines = bytes.split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) }
        guard lines.count == 2, lines.allSatisfy({ UUID(uuidString: $0) != nil && $0 == $0.uppercased() }) else { return nil }
        return ContainerUUIDs(data: lines[0], bundle: lines[1])
    }

    /// The recorded UUIDs; drawn and recorded first when there are none (or `renewing`).
    public static func current(_ store: Store, renewing: Bool = false) throws(UserError) -> ContainerUUIDs {
        if !renewing, let recorded = recorded(store) { return recorded }
        let uuids = drawn()
        // Written aside and renamed over: the record is the old one or the new one, whole.
        let temporary = Array(".ios-uuids.\(getpid())".utf8)
        do {
            _ = withCName(temporary) { unlinkat(store.stateFD, $0, 0) }
            try writeNewFile(at: store.stateFD, temporary, Array("\(uuids.data)\n\(uuids.bundle)\n".utf8), mode: 0o600)
            try withCName(temporary) { (from) throws(Errno) in
                try withCName(fileName) { (to) throws(Errno) in _ = try sys { renameat(store.stateFD, from, store.stateFD, to) } }
            }
        } catch {
            _ = withCName(temporary) { unlinkat(store.stateFD, $0, 0) }
            throw UserError.failed("cannot record the container's UUIDs in \(store.statePath)", error)
        }
        return uuids
    }

    /// Forgets the recorded UUIDs (`update`, a reinstall): the next run draws new ones.
    public static func forget(_ store: Store) {
        _ = withCName(fileName) { unlinkat(store.stateFD, $0, 0) }
    }

    static let groupFileName = Array("ios-uuid".utf8)

    /// The UUID under which `run --layout ios` shows the group container `group` to its
    /// members (`/private/var/mobile/Containers/Shared/AppGroup/<UUID>`, docs/groups.md):
    /// one per group, the same for every member and from run to run, recorded in the
    /// group's state folder (`ios-uuid`) at the first run that needs it. Two members'
    /// first runs at once agree: each writes its draw aside and links it to the name, which
    /// only the first link makes; both then read the one recorded.
    public static func group(_ group: Store) throws(UserError) -> String {
        if let recorded = recordedGroup(group) { return recorded }
        let temporary = Array(".ios-uuid.\(getpid())".utf8)
        do {
            _ = withCName(temporary) { unlinkat(group.stateFD, $0, 0) }
            try writeNewFile(at: group.stateFD, temporary, Array("\(UUID().uuidString)\n".utf8), mode: 0o600)
            defer { _ = withCName(temporary) { unlinkat(group.stateFD, $0, 0) } }
            let linked = withCName(temporary) { from in withCName(groupFileName) { to in linkat(group.stateFD, from, group.stateFD, to, 0) } }
            if linked != 0, errno != EEXIST { throw Errno.current }
        } catch {
            throw UserError.failed("cannot record the group's UUID in \(group.statePath)", error)
        }
        guard let recorded = recordedGroup(group) else {
            throw UserError("the group's UUID recorded in \(group.statePath) is damaged: remove \(group.statePath)/ios-uuid, the next run draws a new one")
        }
        return recorded
    }

    /// The group's recorded UUID, or nil when none is (or it is not one upper-case UUID).
    static func recordedGroup(_ group: Store) -> String? {
        guard let bytes = try? readFile(at: group.stateFD, groupFileName, limit: smallStateFileLimit) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self)
        guard text.hasSuffix("\n") else { return nil }
        let line = String(text.dropLast())
        return UUID(uuidString: line) != nil && line == line.uppercased() ? line : nil
    }
}
