# Vendored from ByteDance-Seed/VeOmni (https://github.com/ByteDance-Seed/VeOmni), file
# veomni/utils/data_balance/balance_sorting_algo.py at commit
# d9774494f5d8042321386c65c9406e732a271501, verbatim, for python/benchmarks/veomni_compare.py
# and python/tests/test_compat_veomni.py (VeOmni's greedy against orchmllm.compat.veomni).
# Licensed under the Apache License, Version 2.0 (the file's own notice follows).
#
# Copyright 2025 Bytedance Ltd. and/or its affiliates
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

# Sorting algorithm for data balance
from typing import List

import torch


@torch.no_grad()
def post_mbs_balancing_greedy_without_pad(
    all_data_lengths: torch.Tensor,
    num_replicas: int,
    dim: int,
) -> List[List[torch.Tensor]]:
    """
    A greedy bin-packing sorting algorithm designed for encoder data balance.
    It initializes a number of bins equal to the dp group size, and iteratively assigns data (sorted in descending order
    based on data length) to the bin with the smallest current load.

    The load of a bin is defined as the sum of the lengths^2 of its elements

    Args:
        all_data_lengths: the length information of data gathered from all dp ranks
        num_replicas: the size of dp group
        dim: the dimension along with the data in all_data_lengths is used for sorting

    Returns:
        a list that contains ${dp group size} buckets, where each bucket stores the sequence length and coordinate of
        the data assigned to the respective dp rank after balancing
    """
    # Note: AiCore does not support dtype int32 or int 64 for argsort
    sort_indice = torch.argsort(all_data_lengths[:, dim].float(), descending=True)
    all_data_lengths = all_data_lengths[sort_indice]
    lengths_per_sequence = (all_data_lengths[:, dim] ** 2).cpu()

    pre_fill_num = min(num_replicas, len(all_data_lengths))
    dp_group_total_length = torch.empty(num_replicas, dtype=torch.long)
    dp_group_total_length[:pre_fill_num] = lengths_per_sequence[:pre_fill_num]
    balanced_image_dp_batch = [[all_data_lengths[i]] if i < pre_fill_num else [] for i in range(num_replicas)]

    for i, sequence_lentgh in enumerate(all_data_lengths[pre_fill_num:]):
        target_dp_group = dp_group_total_length.argmin()
        balanced_image_dp_batch[target_dp_group].extend([sequence_lentgh])
        dp_group_total_length[target_dp_group] += lengths_per_sequence[i + num_replicas]

    return balanced_image_dp_batch


SORTING_ALGO_FUNC = {
    "post_mbs_balancing_greedy_without_pad": post_mbs_balancing_greedy_without_pad,
}
