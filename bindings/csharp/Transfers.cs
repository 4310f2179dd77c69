// KV transfers between engines (pkv 0.12, DESIGN.md §10), disaggregated prefill and decode: a
// producer engine holds a finished sequence's blocks while a transport reads them
// (Engine.SeqSegments, Engine.SeqStateSegment; Engine.Hold, or a request's
// RequestParams.HoldOnFinish), then ends the hold (Engine.HoldEnd); a consumer engine admits a
// request of RequestParams.NumRemoteTokens, which waits RECEIVING (Engine.DrainReceiving) while
// the transport writes its blocks, then runs on (Engine.ReceiveEnd). pkv moves no bytes itself:
// the host's transport does, between engines of equal Engine.LayoutFingerprint.
using System;

namespace Pkv
{
    /// <summary>Where a sequence is in a transfer (SeqInfo.TransferState, since 0.12,
    /// PKV_TRANSFER_NONE .. RECEIVING).</summary>
    public enum TransferState : uint
    {
        /// <summary>In no transfer.</summary>
        None = Native.PKV_TRANSFER_NONE,
        /// <summary>Its blocks (and its state working slot) are held for a transfer out
        /// (Engine.Hold, RequestParams.HoldOnFinish) until Engine.HoldEnd or the hold's timeout;
        /// Sequence.Release is refused meanwhile.</summary>
        Holding = Native.PKV_TRANSFER_HOLDING,
        /// <summary>A request waiting for its first NumRemoteTokens' KV (Engine.DrainReceiving)
        /// until Engine.ReceiveEnd: never run, never preempted, Sequence.Release refused.</summary>
        Receiving = Native.PKV_TRANSFER_RECEIVING,
    }

    /// <summary>How a transfer ended (Engine.HoldEnd, Engine.ReceiveEnd; since 0.12,
    /// PKV_TRANSFER_DONE .. FAILED_FINISH).</summary>
    public enum TransferOutcome : uint
    {
        /// <summary>Every byte arrived (HoldEnd: the transport is done with them).</summary>
        Done = Native.PKV_TRANSFER_DONE,
        /// <summary>It did not: a receiving request uses nothing the transfer wrote and computes
        /// its prompt itself (preempted, admitted again).</summary>
        Failed = Native.PKV_TRANSFER_FAILED,
        /// <summary>It did not, and the receiving request finishes
        /// (FinishReason.TransferFailed; DrainFinished lists it). ReceiveEnd only.</summary>
        FailedFinish = Native.PKV_TRANSFER_FAILED_FINISH,
    }

    public partial struct SeqInfo
    {
        /// <summary>Transfer (since 0.12): None, Holding or Receiving (then RemoteFirstBlock ..
        /// RemoteFirstBlock + RemoteNumBlocks - 1 are the blocks whose KV must arrive, the local
        /// prefix hit before them, and NumRemoteTokens the tokens it arrives for).</summary>
        public TransferState TransferState { get { return (TransferState)Transfer; } }
    }

    public sealed unsafe partial class Engine
    {
        /// <summary>A hold's timeout that never ends it (HoldTimeoutMs and Hold's timeoutMs,
        /// UINT32_MAX); 0 is Constants.TransferTimeoutDefaultMs (480 s).</summary>
        public const uint NoTimeout = uint.MaxValue;

        /// <summary>Holds <paramref name="seq"/> (an Allocate sequence, all its tokens computed)
        /// for a transfer out (pkv_hold, since 0.12): it stops running and keeps its blocks (and
        /// its state working slot) untouched until HoldEnd, its timeout (timeoutMs after this
        /// call; 0: Constants.TransferTimeoutDefaultMs; NoTimeout: none) or Dispose. Then it is
        /// finished: it holds nothing, and Release ends it. Meanwhile SeqSegments and
        /// SeqStateSegment give its bytes, its sealed blocks stay in the prefix cache, and
        /// Sequence.Release is refused (State). A request holds when it finishes instead
        /// (RequestParams.HoldOnFinish). PkvException NotFound (no such sequence); State (not
        /// running, in the open batch, uncomputed tokens, or a request); NoSpace (its blocks would
        /// pass EngineParams.MaxHeldBlocks; nothing changed); Unsupported (a timeout other than
        /// NoTimeout on an engine of one rank of several).</summary>
        public void Hold(Sequence seq, uint timeoutMs = 0)
        {
            if (seq == null) throw new ArgumentNullException("seq");
            lock (gate) Call(Native.pkv_hold(Handle, seq.Id, timeoutMs));
        }

        /// <summary>Ends <paramref name="seq"/>'s hold (pkv_hold_end, since 0.12): the transport
        /// is done with its bytes. outcome Done or Failed (counted apart: Stats.NumHoldsDone,
        /// NumHoldsFailed). Its blocks go back (sealed ones stay cached) and it is finished;
        /// Release it. PkvException InvalidArgument (outcome not Done or Failed); NotFound (no
        /// such sequence); State (it holds nothing: never held, or the hold ended or timed
        /// out).</summary>
        public void HoldEnd(Sequence seq, TransferOutcome outcome)
        {
            if (seq == null) throw new ArgumentNullException("seq");
            lock (gate) Call(Native.pkv_hold_end(Handle, seq.Id, (uint)outcome));
        }

        /// <summary>The requests that began receiving since the last call (pkv_drain_receiving,
        /// since 0.12), each listed once: a request of RequestParams.NumRemoteTokens N that Step
        /// admitted with a local prefix hit of fewer than N tokens waits, Receiving, instead of
        /// running. Its SeqInfo gives the blocks whose KV must arrive (RemoteFirstBlock,
        /// RemoteNumBlocks), SeqSegments their segments, SeqStateSegment where its recurrent state
        /// goes; the transport writes them, then ReceiveEnd. A hit covering N admits it as an
        /// ordinary request, never listed.</summary>
        public ulong[] DrainReceiving()
        {
            var all = new System.Collections.Generic.List<ulong>();
            var buf = new ulong[256];
            uint got;
            do
            {
                lock (gate)
                    fixed (ulong* p = buf)
                        Call(Native.pkv_drain_receiving(Handle, p, (uint)buf.Length, &got));
                for (int i = 0; i < got; i++) all.Add(buf[i]);
            } while (got == buf.Length);
            return all.ToArray();
        }

        /// <summary>Ends receiving request <paramref name="seq"/>'s remote fill (pkv_receive_end,
        /// since 0.12). Done: its first NumRemoteTokens tokens are computed, their full blocks
        /// sealed into the prefix cache as a step's would be, and it runs on from there at the
        /// next Step. Failed: nothing the transfer wrote is used; it waits to be admitted again
        /// and computes its prompt itself. FailedFinish: it gives everything back and finishes
        /// (FinishReason.TransferFailed; DrainFinished lists it). PkvException InvalidArgument (an
        /// outcome not a TransferOutcome); NotFound (no such sequence); State (not
        /// receiving).</summary>
        public void ReceiveEnd(Sequence seq, TransferOutcome outcome)
        {
            if (seq == null) throw new ArgumentNullException("seq");
            lock (gate) Call(Native.pkv_receive_end(Handle, seq.Id, (uint)outcome));
        }

        /// <summary>Where <paramref name="seq"/>'s recurrent state is on rank
        /// <paramref name="rank"/> (pkv_seq_state_segment, since 0.12): its state working slot
        /// (PoolInfo.StatePool + slot * StateSlotBytes, StateSlotBytes bytes) while it is running,
        /// held or receiving; a transport moves it beside SeqSegments' blocks. An engine without
        /// state layers gives Address Zero and Bytes 0: no state to move. PkvException
        /// InvalidArgument (a rank not below the engine's ranks); NotFound (no such sequence);
        /// State (it holds no working slot: waiting, preempted, swapped out or
        /// finished).</summary>
        public Segment SeqStateSegment(uint rank, Sequence seq)
        {
            if (seq == null) throw new ArgumentNullException("seq");
            var s = new Segment();
            lock (gate) Call(Native.pkv_seq_state_segment(Handle, rank, seq.Id, &s));
            return s;
        }
    }
}
