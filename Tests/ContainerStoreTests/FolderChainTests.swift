import Foundation
import Glibc
import Testing

@testable import ContainerStore

/// The walk's folders, with a bounded number of descriptors.
@Suite("Folder chain")
struct FolderChainTests {
    /// A fresh folder in /tmp holding a chain `d/d/…` of `depth` folders; removed afterwards.
    private final class Chain {
        let base: String
        let top: Int32

        init(depth: Int) throws {
            var template = Array("/tmp/containerfs-chain-XXXXXX".utf8CString)
            guard let made = mkdtemp(&template) else { throw Errno.current }
            base = String(cString: made)
            top = open(base, O_RDONLY | O_DIRECTORY)
            var fd = dup(top)
            for _ in 0..<depth {
                mkdirat(fd, "d", 0o755)
                let child = openat(fd, "d", O_RDONLY | O_DIRECTORY)
                close(fd)
                fd = child
            }
            close(fd)
        }

        deinit {
            close(top)
            _ = try? FileManager.default.removeItem(atPath: base)
        }
    }

    /// How many descriptors this process has open on the chain's folders (its top among
    /// them). Only those: other suites running at the same time (`swift test --parallel`)
    /// open and close descriptors of their own, pipes to the programs they run among them.
    private func openDescriptors(in chain: Chain) -> Int {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return -1 }
        return names.filter { name in
            var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let length = readlink("/proc/self/fd/" + name, &target, target.count - 1)
            guard length > 0 else { return false }
            let path = String(decoding: target[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            return path == chain.base || path.hasPrefix(chain.base + "/")
        }.count
    }

    @Test func goingDownAndUpHoldsAtMostTheWindowOpen() throws {
        let chain = try Chain(depth: 300)
        let before = openDescriptors(in: chain)
        #expect(before == 1, "the chain's top")
        let walk = try FolderChain(top: chain.top, window: 8)
        for _ in 0..<300 { try walk.enter(Array("d".utf8)) }
        #expect(openDescriptors(in: chain) - before <= 8)
        #expect(walk.depth == 300)
        for _ in 0..<300 { try walk.leave() }
        #expect(walk.depth == 0 && walk.fd == chain.top, "back at the top, the caller's descriptor")
        #expect(openDescriptors(in: chain) == before)
    }

    /// A folder above the window moved away during the walk: climbing past it through `..`
    /// reaches another folder than the one entered, and the walk ends with ESTALE.
    @Test func aFolderMovedDuringTheWalkEndsItWithESTALE() throws {
        let chain = try Chain(depth: 40)
        let walk = try FolderChain(top: chain.top, window: 4)
        for _ in 0..<40 { try walk.enter(Array("d".utf8)) }
        let tenth = chain.base + String(repeating: "/d", count: 10)
        #expect(rename(tenth, chain.base + "/moved") == 0)
        var error: Errno?
        while walk.depth > 0, error == nil {
            do { try walk.leave() } catch let caught { error = caught }
        }
        #expect(error?.code == ESTALE)
        #expect(walk.depth == 9, "stopped where the moved folder's parent should have been")
    }
}
