# SPDX-License-Identifier: Apache-2.0
"""The torch fast path: built by composition around a reference policy and its very tensors."""
